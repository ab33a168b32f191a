"""The two workloads that bracket acceptance, with texts written for this project.

Both workloads share one two-turn history, so prompt length and content are matched and only
the final request differs. The history is: the user gives a passage (the first three
paragraphs of ``texts/passage_*.txt``) and asks for it verbatim; the assistant's turn is the
passage itself. Then:

* ``repeat`` — the user asks for the same passage once more, and the assistant's reply is
  started with the passage's first sentence (``continue_final_message``). Having copied the
  text once, even a 135M model copies it again token for token, at batch 1 and batch 4 alike;
  asked only once, it drifted or summarised after a paragraph. n-gram lookup then finds every
  next token in the context: high acceptance.
* ``edit`` — the user asks for the passage copied with one word replaced throughout (a word
  that occurs in the passage a few times). The reply is not primed. The model copies most of
  the passage and departs from it at the edits and wherever it paraphrases: n-gram lookup is
  right most of the time but not always — the interior of the acceptance range, on a
  project-written text (the upper band that third-party prompts do not reach).
* ``open`` — the user asks for a new story on an unrelated subject, and the reply is started
  with a fresh first line. Greedy decoding of a model this small falls into loops that n-gram
  lookup then predicts (α 0.3–0.9 in trials), which is not open-ended generation, so 'open'
  decodes greedily with a repetition penalty of 1.2 (deterministic, the same in every γ arm;
  it also discourages copying the context): low acceptance.

Request *i* of a batch uses passage *i mod 4* and subject *i mod 4*; contexts are ~820–870
prompt tokens plus the generated tokens, near the paper's 1024.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

__all__ = ["PASSAGES", "OPEN_SUBJECTS", "REPEAT_INSTRUCTION", "EDITS", "Workload", "Request",
           "WORKLOADS", "passages", "PARAGRAPHS", "SAMPLING", "sampling", "messages", "describe",
           "BuiltinSource"]

PASSAGES = ("lighthouse", "bakery", "river", "clock")

OPEN_SUBJECTS = (
    ("a robot that learns to paint on a space station orbiting Jupiter",
     "Unit Seven had never seen a colour it could not name."),
    ("two rival chess players stranded in a desert airport during a sandstorm",
     "The departure board flickered and went dark."),
    ("a dragon who opens a tea shop in a busy modern city",
     "Nobody on Maple Avenue asked why the kettle was so large."),
    ("a detective who can only solve crimes while riding a bicycle",
     "Inspector Vale pedalled faster, and the answer came closer."),
)

REPEAT_INSTRUCTION = ("Repeat the passage above exactly, word for word, from its first "
                      "sentence to its last. Do not summarise and do not add anything.")


EDITS = {"lighthouse": ("sea", "ocean"), "bakery": ("flour", "meal"),
         "river": ("river", "stream"), "clock": ("clock", "timepiece")}


@dataclass(frozen=True)
class Workload:
    name: str
    description: str


@dataclass(frozen=True)
class Request:
    """One prompt of a workload, before tokenization.

    ``continue_final``: the last (assistant) message is continued (the project's primed
    replies); otherwise the chat template's generation prompt is added, as vLLM's own
    benchmark datasets do. ``max_tokens`` overrides the sweep's output length (an operator's
    ``output_tokens``)."""
    id: str
    messages: tuple
    continue_final: bool = False
    max_tokens: int | None = None


WORKLOADS = {
    "repeat": Workload("repeat", "reproduce the passage verbatim; reply primed with its "
                                 "first sentence (high acceptance)"),
    "open": Workload("open", "same passage as context, then a new story on an unrelated "
                             "subject; reply primed with a fresh first line (low acceptance)"),
    "edit": Workload("edit", "copy the passage with one word replaced throughout; reply not "
                             "primed (interior acceptance)"),
}


def passages() -> dict[str, str]:
    folder = resources.files("specbench.measure.workloads") / "texts"
    return {name: (folder / f"passage_{name}.txt").read_text().strip() for name in PASSAGES}


PARAGRAPHS = 3
SAMPLING = {"repeat": {"temperature": 0.0, "repetition_penalty": 1.0},
            "open": {"temperature": 0.0, "repetition_penalty": 1.2},
            "edit": {"temperature": 0.0, "repetition_penalty": 1.0}}


def sampling(workload: str) -> dict:
    """Sampling parameters of a workload (greedy; see the module text for 'open')."""
    _check(workload)
    return dict(SAMPLING[workload])


def _check(workload: str) -> None:
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose from {sorted(WORKLOADS)}")


def _first_sentence(text: str) -> str:
    return text.split(". ", 1)[0] + "."


def messages(workload: str, index: int) -> list[dict[str, str]]:
    """Chat messages of request ``index``; the last (assistant) message is to be continued."""
    _check(workload)
    full = passages()[PASSAGES[index % len(PASSAGES)]]
    passage = "\n".join(full.split("\n")[:PARAGRAPHS])
    history = [{"role": "user", "content": f"{passage}\n\n{REPEAT_INSTRUCTION}"},
               {"role": "assistant", "content": passage}]
    if workload == "edit":
        old, new = EDITS[PASSAGES[index % len(PASSAGES)]]
        return [{"role": "user", "content": f"{passage}\n\nCopy the passage above exactly, but "
                                            f"replace the word '{old}' with '{new}' everywhere."}]
    if workload == "repeat":
        return history + [
            {"role": "user", "content": "Good. Now repeat the same passage exactly once more."},
            {"role": "assistant", "content": _first_sentence(passage)}]
    subject, opening = OPEN_SUBJECTS[index % len(OPEN_SUBJECTS)]
    return history + [
        {"role": "user", "content": f"Good. Now write a completely new and original story "
                                    f"about {subject}. Do not reuse any sentence from the "
                                    "passage."},
        {"role": "assistant", "content": opening}]


def describe() -> dict:
    """What the manifest records: the design, the texts' hashes and the templates."""
    texts = passages()
    return {
        "design": __doc__.strip(),
        "workloads": {w.name: w.description for w in WORKLOADS.values()},
        "passages_sha256": {k: hashlib.sha256(v.encode()).hexdigest() for k, v in texts.items()},
        "repeat_instruction": REPEAT_INSTRUCTION,
        "paragraphs_used": PARAGRAPHS,
        "sampling": SAMPLING,
        "open_subjects": [s for s, _ in OPEN_SUBJECTS],
        "open_openings": [o for _, o in OPEN_SUBJECTS],
        "edit_replacements": EDITS,
    }


class BuiltinSource:
    """The project's own workloads as a prompt source: request *i* uses passage *i mod 4*."""
    store_outputs = True  # texts written for this project: output token ids may be stored

    def __init__(self, name: str):
        _check(name)
        self.name = name

    def candidates(self) -> list[Request]:
        return [Request(f"{self.name}/{i}", tuple(messages(self.name, i)),
                        continue_final=self.name != "edit") for i in range(len(PASSAGES))]

    def sampling(self) -> dict:
        return sampling(self.name)

    def describe(self) -> dict:
        return {"source": "project", "name": self.name,
                "description": WORKLOADS[self.name].description}
