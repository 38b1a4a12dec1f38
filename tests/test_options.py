import os
import warnings

import pytest

from kernelpro_backend.backend import make_backend
from kernelpro_backend.cli.main import main
from kernelpro_backend.explain import find_subgraphs
from kernelpro_backend.fx_passes.patterns import check_pattern_names, is_pattern_name
from kernelpro_backend.options import Options, OptionsError
from kernelpro_backend.rewrite.providers import NullProvider


def test_defaults():
    o = Options.resolve(environ={})
    assert o.search == "cache-only" and o.fallback == "inductor" and o.precision == "auto"


def test_options_override_environment():
    env = {"KERNELPRO_SEARCH": "off", "KERNELPRO_BUDGET_S": "30", "KERNELPRO_FALLBACK": "eager"}
    o = Options.resolve(options={"search": "on-miss"}, environ=env)
    assert o.search == "on-miss"  # explicit option wins
    assert o.budget_s == 30.0 and o.fallback == "eager"  # from the environment


def test_environment_parsing():
    env = {
        "KERNELPRO_PROGRESS": "no",
        "KERNELPRO_EXTRA_CACHE_DIRS": "/a:/b",
        "KERNELPRO_WORKERS": "2",
    }
    o = Options.resolve(environ=env)
    assert o.progress is False and o.extra_cache_dirs == ("/a", "/b") and o.workers == 2


def test_search_patterns_from_environment_and_options():
    env = {"KERNELPRO_SEARCH_PATTERNS": "sdpa_backward, rms_norm"}
    assert Options.resolve(environ=env).search_patterns == ("sdpa_backward", "rms_norm")
    o = Options.resolve(options={"search_patterns": ["softmax"]}, environ=env)
    assert o.search_patterns == ("softmax",)
    assert Options.resolve(options={"search_patterns": "softmax"}, environ={}).search_patterns == (
        "softmax",
    )
    o = Options.resolve(options={"search_patterns": "softmax, rms_norm"}, environ={})
    assert o.search_patterns == ("softmax", "rms_norm")  # a string splits as in the environment
    with pytest.raises(OptionsError, match="list of pattern names"):
        Options.resolve(options={"search_patterns": [1]}, environ={})


def test_search_tools_from_environment_and_options():
    assert Options.resolve(environ={}).search_tools == ("ptxas", "sass")
    env = {"KERNELPRO_SEARCH_TOOLS": "ptxas, ncu"}
    assert Options.resolve(environ=env).search_tools == ("ptxas", "ncu")
    assert Options.resolve(environ={"KERNELPRO_SEARCH_TOOLS": "none"}).search_tools == ()
    o = Options.resolve(options={"search_tools": "sass,ptxas,sass"}, environ=env)
    assert o.search_tools == ("sass", "ptxas")  # a string splits as in the environment; once each
    assert Options.resolve(options={"search_tools": ["ncu"]}, environ={}).search_tools == ("ncu",)
    assert Options.resolve(options={"search_tools": ()}, environ={}).search_tools == ()
    assert Options.resolve(options={"search_tools": "none"}, environ={}).search_tools == ()


@pytest.mark.parametrize(
    ("where", "value"),
    [("options", "vtune"), ("options", ["ptxas", "nsys"]), ("environ", "ptxas,vtune")],
)
def test_unknown_search_tools_list_the_known_names(where, value):
    kwargs = (
        {"options": {"search_tools": value}, "environ": {}}
        if where == "options"
        else {"environ": {"KERNELPRO_SEARCH_TOOLS": value}}
    )
    with pytest.raises(OptionsError, match="unknown profiling tools") as info:
        Options.resolve(**kwargs)
    for name in ("energy", "ncu", "ptxas", "sass", "timeline", "'none'"):
        assert name in str(info.value)
    with pytest.raises(OptionsError, match="list of profiling tool names"):
        Options.resolve(options={"search_tools": [1]}, environ={})


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"serch": "off"}, "unknown kernelpro option 'serch'"),
        ({"search": "always"}, "expected one of"),
        ({"budget_s": -1}, "greater than 0"),
        ({"max_trials": 2.5}, "whole number"),
        ({"progress": "yes"}, "True or False"),
        ({"proposer": "gpt"}, r"expected one of \['rules', 'llm'\]"),
        ({"llm_model": 4}, "expected a model name"),
        ({"cache_dir": 4}, "expected a directory path"),
    ],
)
def test_bad_options_say_what_is_wrong(options, message):
    with pytest.raises(OptionsError, match=message):
        Options.resolve(options=options, environ={})


def test_bad_environment_value():
    with pytest.raises(OptionsError, match="KERNELPRO_BUDGET_S"):
        Options.resolve(environ={"KERNELPRO_BUDGET_S": "soon"})


def test_unknown_mode():
    with pytest.raises(OptionsError, match="mode='fastest': expected one of .*'max-autotune'"):
        Options.resolve(mode="fastest", environ={})
    assert Options.resolve(mode="max-autotune", environ={}).search == "cache-only"


def test_an_unknown_option_name_gets_the_closest_one():
    with pytest.raises(OptionsError, match=r"unknown kernelpro option 'fallbak'; did you mean "
                       r"'fallback'\? \(known: search, fallback, "):  # fmt: skip
        Options.resolve(options={"fallbak": "eager"}, environ={})
    with pytest.raises(OptionsError) as nothing_close:
        Options.resolve(options={"zzz": 1}, environ={})
    assert "did you mean" not in str(nothing_close.value)


def test_the_inductor_mode_comes_from_mode_options_or_the_environment():
    """torch.compile takes `mode=` or `options=`, not both: `inductor_mode` is the mode as an
    option, so both can be given through options (or KERNELPRO_INDUCTOR_MODE)."""
    assert Options.resolve(environ={}).inductor_mode == "default"
    assert Options.resolve(mode="max-autotune", environ={}).inductor_mode == "max-autotune"
    both = Options.resolve(options={"inductor_mode": "max-autotune", "search": "off"}, environ={})
    assert (both.inductor_mode, both.search) == ("max-autotune", "off")
    env = {"KERNELPRO_INDUCTOR_MODE": "reduce-overhead"}
    assert Options.resolve(environ=env).inductor_mode == "reduce-overhead"
    same = Options.resolve(mode="max-autotune", options={"inductor_mode": "max-autotune"})
    assert same.inductor_mode == "max-autotune"
    with pytest.raises(OptionsError, match="disagree"):
        Options.resolve(mode="max-autotune", options={"inductor_mode": "reduce-overhead"})
    with pytest.raises(OptionsError, match="options\\['inductor_mode'\\]='fast': expected one of"):
        Options.resolve(options={"inductor_mode": "fast"}, environ={})


def test_the_searcher_leaves_patterns_outside_search_patterns_to_the_fallback(caplog):
    """Nothing is lowered, measured or started for a subgraph whose pattern was not selected."""
    import logging

    import torch
    from helpers import subgraphs_of

    from kernelpro_backend.tuner.searcher import SubgraphSearcher

    (softmax,) = subgraphs_of(torch.nn.Softmax(-1), torch.randn(4, 8), train=False)
    assert softmax.pattern == "softmax"
    searcher = SubgraphSearcher(
        Options.resolve(options={"search_patterns": ["rms_norm"]}, environ={})
    )
    with caplog.at_level(logging.INFO, logger="kernelpro"):
        assert searcher(softmax) is None
    from kernelpro_backend.runtime import shared_pool

    assert shared_pool._KEEPER.pool is None  # no worker was started
    assert "not in search_patterns (rms_norm)" in caplog.text


def test_llm_model_from_options_or_environment():
    assert Options.resolve(environ={}).llm_model is None  # then $OPENAI_MODEL, then a default
    env = {"KERNELPRO_PROPOSER": "llm", "KERNELPRO_LLM_MODEL": "local-coder"}
    o = Options.resolve(environ=env)
    assert o.proposer == "llm" and o.llm_model == "local-coder"
    assert Options.resolve(options={"llm_model": "chosen"}, environ=env).llm_model == "chosen"


def test_default_workers_follow_the_cpu_count():
    from kernelpro_backend.options import default_workers

    assert [default_workers(n, 1) for n in (1, 2, 4, 8, 16, 64)] == [2, 2, 2, 4, 8, 8]
    # ranks sharing the host share its cores: 2 ranks on 32 cores take 6 each, not 8
    assert [default_workers(32, r) for r in (2, 4, 8)] == [6, 3, 2]
    assert default_workers(128, 8) == 6
    assert Options.resolve(environ={}).workers == default_workers()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "nan", "inf"])
def test_budgets_must_be_finite(value):
    with pytest.raises(OptionsError, match="finite"):
        if isinstance(value, str):
            Options.resolve(environ={"KERNELPRO_BUDGET_S": value})
        else:
            Options.resolve(options={"budget_s": value}, environ={})


def test_extra_cache_dirs_split_the_same_from_options_and_environment():
    joined = os.pathsep.join(["/a", "/b"])
    from_env = Options.resolve(environ={"KERNELPRO_EXTRA_CACHE_DIRS": joined})
    from_options = Options.resolve(options={"extra_cache_dirs": joined}, environ={})
    assert from_env.extra_cache_dirs == from_options.extra_cache_dirs == ("/a", "/b")


def test_bundle_signing_options_from_options_and_environment(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).write_bytes(os.urandom(32))
    joined = os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")])
    env = {"KERNELPRO_TRUSTED_BUNDLE_KEYS": joined, "KERNELPRO_REQUIRE_SIGNED_BUNDLES": "yes"}
    from_env = Options.resolve(environ=env)
    assert from_env.trusted_bundle_keys == (str(tmp_path / "a"), str(tmp_path / "b"))
    assert from_env.require_signed_bundles
    defaults = Options.resolve(environ={})
    assert defaults.trusted_bundle_keys == () and defaults.require_signed_bundles is False
    from_options = Options.resolve(options={"trusted_bundle_keys": joined}, environ={})
    assert from_options.trusted_bundle_keys == from_env.trusted_bundle_keys
    with pytest.raises(OptionsError, match="expected a list of key file paths"):
        Options.resolve(options={"trusted_bundle_keys": [1]}, environ={})
    with pytest.raises(OptionsError, match="expected True or False"):
        Options.resolve(options={"require_signed_bundles": "sometimes"}, environ={})


def test_an_unknown_variable_is_warned_with_the_closest_name():
    with pytest.warns(UserWarning, match="KERNELPRO_BUDGET is not a kernelpro setting.*"
                      "did you mean KERNELPRO_BUDGET_S"):  # fmt: skip
        Options.resolve(environ={"KERNELPRO_BUDGET": "30"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # known names, options and other variables: no warning
        Options.resolve(environ={"KERNELPRO_BUDGET_S": "30", "KERNELPRO_CUBIN_DIR": "/x"})


def test_misspelt_search_patterns_fail_with_the_closest_name():
    with pytest.raises(OptionsError, match="'softmx' \\(did you mean 'softmax'\\?\\)"):
        check_pattern_names(("softmx", "rms_norm"))
    check_pattern_names(("softmax", "addmm+epilogue", "sdpa_backward", "convolution+epilogue"))
    backend = make_backend(provider=NullProvider())
    with pytest.raises(OptionsError, match="rms_nrom"):
        backend(None, [], options={"search_patterns": "rms_nrom"})


def test_every_name_a_real_model_gives_is_a_pattern_name():
    from kernelpro_backend import examples

    names = set()
    for build in (examples.transformer_block, examples.convnet, examples.mlp):
        model, inputs = build("cpu")
        names |= {sg.pattern for sg in find_subgraphs(model, *inputs)}
    assert names and all(is_pattern_name(n) for n in names), sorted(names)


def test_demo_refuses_zero_steps(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--steps", "0"])
    assert "at least 1 step" in capsys.readouterr().err


TIMEOUTS = {
    "worker_start_timeout_s": 180.0,
    "nvcc_timeout_s": 90.0,
    "llm_timeout_s": 180.0,
    "job_timeout_s": 120.0,
    "ncu_timeout_s": 240.0,
    "ncu_run_timeout_s": 120.0,
    "check_timing_s": 0.05,
}


@pytest.mark.parametrize("name", sorted(TIMEOUTS))
def test_every_timeout_is_an_option_from_the_environment_or_options(name):
    assert getattr(Options.resolve(environ={}), name) == TIMEOUTS[name]
    assert getattr(Options.resolve(environ={f"KERNELPRO_{name.upper()}": "5"}), name) == 5.0
    assert getattr(Options.resolve(options={name: 7}, environ={}), name) == 7.0
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(OptionsError, match=name):
            Options.resolve(options={name: bad}, environ={})
    with pytest.raises(OptionsError, match="finite"):
        Options.resolve(environ={f"KERNELPRO_{name.upper()}": "inf"})


def test_the_timeouts_defaults_are_the_modules_constants():
    from kernelpro_backend.profilers.ncu import NCU_RUN_TIMEOUT_S
    from kernelpro_backend.profilers.target import ProfileTarget
    from kernelpro_backend.runtime.cuda.compile import NVCC_TIMEOUT_S
    from kernelpro_backend.runtime.feedback import FeedbackPlan
    from kernelpro_backend.runtime.pool import START_TIMEOUT_S
    from kernelpro_backend.search.llm.client import TIMEOUT_S

    o = Options.resolve(environ={})
    assert (o.worker_start_timeout_s, o.nvcc_timeout_s, o.llm_timeout_s) == (
        START_TIMEOUT_S,
        NVCC_TIMEOUT_S,
        TIMEOUT_S,
    )
    assert o.ncu_run_timeout_s == NCU_RUN_TIMEOUT_S == ProfileTarget().ncu_run_timeout_s
    assert FeedbackPlan(roofs=None).ncu_run_timeout_s == NCU_RUN_TIMEOUT_S


def test_the_timeouts_reach_the_workers_and_the_llm_client():
    from kernelpro_backend.runtime import WorkerSetup
    from kernelpro_backend.tuner.searcher import make_proposer

    env = {"KERNELPRO_NVCC_TIMEOUT_S": "11", "KERNELPRO_LLM_TIMEOUT_S": "13"}
    o = Options.resolve(options={"proposer": "llm"}, environ=env)
    assert WorkerSetup.of(o).nvcc_timeout_s == 11.0
    endpoint = {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1", "OPENAI_API_KEY": "k"}
    assert make_proposer(o, environ=endpoint).client.client.timeout == 13.0


def test_compile_sizes_parse_from_text_lists_and_the_environment():
    assert Options.resolve(options={"compile_sizes": "512, 256,512"}, environ={}).compile_sizes == (
        256,
        512,
    )
    assert Options.resolve(options={"compile_sizes": [8, 1]}, environ={}).compile_sizes == (1, 8)
    env = {"KERNELPRO_COMPILE_SIZES": "1,2,4"}
    assert Options.resolve(environ=env).compile_sizes == (1, 2, 4)
    for bad in ("a,b", [0], [2.5], "-1", [True]):
        with pytest.raises(OptionsError, match="compile_sizes"):
            Options.resolve(options={"compile_sizes": bad}, environ={})


def test_cutlass_jobs_may_be_zero_but_not_negative():
    assert Options.resolve(environ={}).cutlass_jobs == 6
    assert Options.resolve(environ={"KERNELPRO_CUTLASS_JOBS": "0"}).cutlass_jobs == 0
    with pytest.raises(OptionsError, match="cutlass_jobs"):
        Options.resolve(options={"cutlass_jobs": -1}, environ={})


@pytest.mark.parametrize(
    ("name", "value", "bound"),
    [
        ("workers", 10**9, max(8, os.cpu_count() or 1)),
        ("cutlass_jobs", 10**6, max(8, os.cpu_count() or 1)),
        ("max_trials", 10**7, 10_000),
        ("budget_s", 10**6, 86_400),
        ("timing_s", 250.0, 60),
        ("distributed_timeout_s", 10**8, 7 * 86_400),
    ],
)
def test_counts_and_seconds_have_an_upper_bound_named_in_the_error(name, value, bound):
    """A billion workers would start a billion processes: refused, from options or the
    environment alike, with the bound in the message; the bound itself is accepted."""
    for kwargs in ({"options": {name: value}, "environ": {}},
                   {"environ": {f"KERNELPRO_{name.upper()}": str(value)}}):  # fmt: skip
        with pytest.raises(OptionsError, match=f"(?i){name}.*must be at most {bound} "):
            Options.resolve(**kwargs)
    assert getattr(Options.resolve(options={name: bound}, environ={}), name) == bound


def test_the_worker_bound_follows_the_cpu_count_and_never_refuses_the_default(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert Options.resolve(options={"workers": 64}, environ={}).workers == 64
    with pytest.raises(OptionsError, match="at most 64"):
        Options.resolve(options={"workers": 65}, environ={})
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert Options.resolve(options={"workers": 8}, environ={}).workers == 8


def test_path_options_take_path_objects_and_name_the_option_on_a_bad_type(tmp_path):
    from pathlib import Path

    key = tmp_path / "key"
    key.write_bytes(os.urandom(32))
    (tmp_path / "bundles").mkdir()
    o = Options.resolve(
        options={"cache_dir": tmp_path / "c", "extra_cache_dirs": tmp_path / "bundles",
                 "trusted_bundle_keys": [key]},
        environ={},
    )  # fmt: skip
    assert o.cache_dir == str(tmp_path / "c") and o.trusted_bundle_keys == (str(key),)
    assert o.extra_cache_dirs == (str(tmp_path / "bundles"),)
    o = Options.resolve(options={"extra_cache_dirs": [Path(tmp_path), str(tmp_path)]}, environ={})
    assert o.extra_cache_dirs == (str(tmp_path), str(tmp_path))
    for name, bad in (("extra_cache_dirs", 5), ("trusted_bundle_keys", [key, 5]),
                      ("extra_cache_dirs", b"/tmp"), ("cache_dir", 3.5)):  # fmt: skip
        with pytest.raises(OptionsError, match=f"options\\['{name}'\\]"):
            Options.resolve(options={name: bad}, environ={})


def test_a_missing_key_file_fails_closed_when_the_options_are_read(tmp_path):
    """Before any device is looked at: the same error on a CPU as on a GPU."""
    gone = str(tmp_path / "absent-key")
    with pytest.raises(OptionsError, match="trusted_bundle_keys.*no key file at .*absent-key"):
        Options.resolve(options={"trusted_bundle_keys": [gone]}, environ={})
    with pytest.raises(OptionsError, match="KERNELPRO_TRUSTED_BUNDLE_KEYS.*absent-key"):
        Options.resolve(environ={"KERNELPRO_TRUSTED_BUNDLE_KEYS": gone})
    with pytest.raises(OptionsError, match="no key file"):  # a directory is not a key file
        Options.resolve(options={"trusted_bundle_keys": [tmp_path]}, environ={})


def test_a_missing_extra_cache_dir_is_one_warning_and_the_options_stand(tmp_path):
    gone = str(tmp_path / "no-such-dir")
    for kwargs in ({"options": {"extra_cache_dirs": [gone, str(tmp_path)]}, "environ": {}},
                   {"environ": {"KERNELPRO_EXTRA_CACHE_DIRS": f"{gone}{os.pathsep}{tmp_path}"}}):  # fmt: skip
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            o = Options.resolve(**kwargs)
        assert o.extra_cache_dirs == (gone, str(tmp_path))
        messages = [str(w.message) for w in caught]
        assert len(messages) == 1 and gone in messages[0] and "does not exist" in messages[0]
