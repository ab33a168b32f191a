"""The mixed step probe's schedule: rows at short and long contexts up to the model's length
less the output, fresh and cached-prefix prefills arriving while they decode, nothing longer
than the engine takes."""
from specbench.measure.step_probe import (
    EXTENSIONS,
    OUTPUT,
    POOL,
    PREFILLS,
    SCHEDULES,
    SHORT_CONTEXT,
    SHORT_PREFILLS,
    arrivals,
    long_contexts,
)

LENGTH = 2048


class Tokenizer:
    def encode(self, text, add_special_tokens=False):
        return [ord(c) % 500 for c in text]


def _plans():
    return list(zip(SCHEDULES, arrivals(Tokenizer(), max_model_len=LENGTH), strict=True))


def test_every_batch_has_its_rows_at_step_zero_and_two_prefills_after():
    for (rows, _kind), plan in _plans():
        decoding = [a for a in plan if a[0] == 0]
        prefills = [a for a in plan if a[0] > 0]
        assert len(decoding) == rows and all(tokens == OUTPUT for *_, tokens in decoding)
        assert len(prefills) == 2 and all(tokens == 1 for *_, tokens in prefills)
        assert max(len(p) + tokens for _, p, tokens in plan) <= LENGTH
        assert len({tuple(p[:8]) for _, p, _ in decoding}) == rows   # no row another's prefix


def test_rows_and_context_vary_apart():
    """Every row count at a short context and at contexts spread to the longest, so the
    per-row and per-context terms are not traded off against each other."""
    contexts = {}
    for (rows, kind), plan in _plans():
        contexts[rows, kind] = [len(p) for step, p, _ in plan if step == 0]
    assert {rows for rows, _ in contexts} == {1, 2, 4, 8}
    assert all(set(contexts[r, "short"]) == {SHORT_CONTEXT} for r in (1, 2, 4, 8))
    longest = LENGTH - OUTPUT - 1
    assert all(max(contexts[r, "long"]) == longest for r in (1, 2, 4, 8))
    assert sorted(contexts[8, "long"]) == long_contexts(longest) and len(set(
        contexts[8, "long"])) == POOL


def test_fresh_prompts_of_64_to_1024_tokens_arrive_beside_short_rows_and_long_ones():
    seen = {}
    for (rows, kind), plan in _plans():
        fresh = plan[-2][1]
        seen.setdefault(len(fresh), []).append((kind, rows))
    assert sorted(seen) == sorted({*PREFILLS, *SHORT_PREFILLS})
    for size in set(PREFILLS) & set(SHORT_PREFILLS):
        assert {k for k, _ in seen[size]} == {"long", "short"}
        assert len({r for _, r in seen[size]}) == 2          # with different numbers of rows


def test_the_long_rows_and_the_extensions_reuse_one_pool_and_nothing_else_is_a_cache_hit():
    """The long rows share the pool (only the first long schedule pays their prefill) and each
    extension starts with a pool prompt; every other prompt starts at its own place."""
    plans = _plans()
    pool = {tuple(p) for (_, kind), plan in plans if kind == "long"
            for step, p, _ in plan if step == 0}
    assert len(pool) == POOL
    for _, plan in plans:
        extended = plan[-1][1]
        assert any(tuple(extended[:len(p)]) == p for p in pool)
        assert len(extended) - max(len(p) for p in pool if tuple(extended[:len(p)]) == p) in {
            *EXTENSIONS, LENGTH - 1 - max(len(p) for p in pool)}
    others = [tuple(p[:16]) for (_, kind), plan in plans for step, p, _ in plan[:-1]
              if not (kind == "long" and step == 0)]
    assert len(set(others)) == len(others)
    assert not set(others) & {p[:16] for p in pool}
