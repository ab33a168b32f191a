"""The mixed step probe's schedule: rows at contexts up to the model's length less the output,
prefills arriving while they decode, nothing longer than the engine takes."""
from specbench.measure.step_probe import FLAT_CONTEXT, OUTPUT, PREFILLS, SCHEDULES, arrivals


class Tokenizer:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) % 500 for c in text]


def test_every_batch_has_its_rows_at_step_zero_and_prefills_after():
    schedules = arrivals(Tokenizer(), max_model_len=2048)
    assert len(schedules) == len(SCHEDULES)
    for (rows, _kind), plan in zip(SCHEDULES, schedules, strict=True):
        decoding = [a for a in plan if a[0] == 0]
        prefills = [a for a in plan if a[0] > 0]
        assert len(decoding) == rows and all(tokens == OUTPUT for *_, tokens in decoding)
        assert sorted(len(p) for _, p, _ in prefills) == sorted(PREFILLS)
        assert max(len(p) for _, p, _ in decoding) + OUTPUT < 2048
        assert len({tuple(p[:8]) for _, p, _ in decoding}) == rows   # no row another's prefix


def test_rows_and_context_vary_apart():
    """The flat schedules hold every row count at one context, so the per-row and
    per-context-token terms are not traded off against each other."""
    schedules = arrivals(Tokenizer(), max_model_len=2048)
    flat = {rows: [len(p) for step, p, _ in plan if step == 0]
            for (rows, kind), plan in zip(SCHEDULES, schedules, strict=True) if kind == "flat"}
    assert sorted(flat) == [1, 2, 4, 8]
    assert all(set(lengths) == {FLAT_CONTEXT} for lengths in flat.values())


def test_no_prompt_is_a_cache_hit_on_another():
    """`make measure` caches prefixes: every prompt of the probe starts at its own place."""
    starts = [tuple(p[:16]) for plan in arrivals(Tokenizer(), max_model_len=2048)
              for _, p, _ in plan]
    assert len(set(starts)) == len(starts)
