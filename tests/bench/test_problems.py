import pytest
import torch

from kernelpro_backend.bench.problems import ProblemError, load_problem, load_problems

CPU = torch.device("cpu")


def test_loads_every_problem_file_as_an_inference_workload(problems_dir):
    workloads = load_problems(problems_dir, CPU)
    assert [w.name for w in workloads] == ["kb:gemm_bias_relu", "kb:layer_norm", "kb:softmax"]
    for w in workloads:
        assert not w.training
        assert w.dtype == torch.float32
        assert w.source.endswith(f"{w.name.removeprefix('kb:')}.py")
        out = w.fresh_model()(*w.inputs)
        assert torch.isfinite(out).all()
    gemm = workloads[0]
    assert gemm.inputs[0].shape == (32, 48)
    assert gemm.model.bias.shape == (40,)


def test_loading_is_seeded(problems_dir):
    a = load_problem(problems_dir / "softmax.py", CPU)
    b = load_problem(problems_dir / "softmax.py", CPU)
    assert torch.equal(a.inputs[0], b.inputs[0])


def test_dtype_override_casts_model_and_float_inputs(problems_dir):
    w = load_problem(problems_dir / "gemm_bias_relu.py", CPU, torch.float64)
    assert w.dtype == torch.float64 and w.inputs[0].dtype == torch.float64
    assert w.model.bias.dtype == torch.float64


def test_file_without_the_kernelbench_functions_is_rejected(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    with pytest.raises(ProblemError, match="lacks get_inputs, get_init_inputs"):
        load_problem(bad, CPU)


def test_file_that_fails_to_import_says_so(tmp_path):
    bad = tmp_path / "boom.py"
    bad.write_text("raise RuntimeError('nope')\n")
    with pytest.raises(ProblemError, match="importing it failed: RuntimeError: nope"):
        load_problem(bad, CPU)


def test_empty_or_missing_directory_is_an_error(tmp_path):
    with pytest.raises(ProblemError, match="no \\*.py problem files"):
        load_problems(tmp_path, CPU)
    with pytest.raises(ProblemError, match="not a directory"):
        load_problems(tmp_path / "nope", CPU)
