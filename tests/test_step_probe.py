"""The mixed step probe's schedule: rows at contexts up to the model's length less the output,
prefills arriving while they decode, nothing longer than the engine takes."""
from specbench.measure.step_probe import OUTPUT, PREFILLS, ROWS, arrivals


class Tokenizer:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) % 500 for c in text]


def test_every_batch_has_its_rows_at_step_zero_and_prefills_after():
    schedules = arrivals(Tokenizer(), max_model_len=2048)
    assert len(schedules) == len(ROWS)
    for rows, plan in zip(ROWS, schedules, strict=True):
        decoding = [a for a in plan if a[0] == 0]
        prefills = [a for a in plan if a[0] > 0]
        assert len(decoding) == rows and all(tokens == OUTPUT for *_, tokens in decoding)
        assert sorted(len(p) for _, p, _ in prefills) == sorted(PREFILLS)
        assert max(len(p) for _, p, _ in decoding) + OUTPUT < 2048
        assert len({tuple(p[:8]) for _, p, _ in decoding}) == rows   # no row another's prefix
