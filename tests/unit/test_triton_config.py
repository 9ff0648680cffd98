"""navigator.triton, pure logic: options, ModelConfig building and its checks, Triton's
ensemble rules on hand-made configs, PyTorch-backend names, the model.py template."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from navigator.errors import UserInputError
from navigator.triton import backends, config as cfg_mod, ensemble, python_backend
from navigator.triton.config import ModelPlan, TensorPlan
from navigator.triton.options import QueuePolicy, RateLimitResource, TritonOptions, from_mapping


# --------------------------------------------------------------------------- options
def test_options_from_user_spellings():
    o = from_mapping({"formats": "onnx,onnx-optimized", "rate_limit_resource": ["R1:2", "R2:1:global"],
                      "queue_policy": "timeout_us=5000,max_queue_size=64,action=delay,allow_override=true",
                      "priority_levels": "3", "preferred_batch_sizes": "8,4,8", "kind": "gpu",
                      "ort_trt_precision": "FP16", "triton_repo": "/tmp/r"})
    assert o.formats == ("onnx", "onnx-optimized")
    assert o.rate_limit_resources == (RateLimitResource("R1", 2), RateLimitResource("R2", 1, True))
    assert o.queue_policy == QueuePolicy(5000, 64, "delay", True)
    assert o.priority_levels == 3 and o.preferred_batch_sizes == (4, 8)
    assert o.ort_trt_precision == "fp16" and o.repo == "/tmp/r"


def test_every_triton_flag_reaches_the_options():
    """Each option of `navigator triton` is handed on (three sequence-batcher flags were parsed and
    then dropped); bad values are refused by the options, one line each."""
    import argparse

    from navigator.cli import triton as cli

    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    dests = {a.dest for a in parser._actions if a.dest not in ("help", "workspace", "quiet", "verbose")}
    assert dests <= set(cli._DESTS), sorted(dests - set(cli._DESTS))
    args = parser.parse_args(["ws", "--sequence-strategy", "direct", "--max-candidate-sequences", "2",
                              "--sequence-idle-us", "1000"])
    o = from_mapping(cli.options_from_args(args))
    assert (o.sequence_strategy, o.max_candidate_sequences, o.sequence_idle_us) == ("direct", 2, 1000)
    for flag, value in (("--max-candidate-sequences", "0"), ("--sequence-idle-us", "-1")):
        with pytest.raises(UserInputError, match=flag.lstrip("-").replace("-", "_") + "|" + flag):
            from_mapping(cli.options_from_args(parser.parse_args(["ws", flag, value])))


@pytest.mark.parametrize("values, message", [
    ({"formats": "best,onnx"}, "best and all stand alone"),
    ({"kind": "tpu"}, "--kind"),
    ({"cuda_graphs": True, "kind": "cpu"}, "--cuda-graphs needs a GPU"),
    ({"ort_trt_precision": "fp16", "kind": "cpu"}, "GPU instances only"),
    ({"ort_trt_precision": "int4"}, "--ort-trt-precision"),
    ({"rate_limit_resource": "R"}, "NAME:COUNT"),
    ({"rate_limit_resource": "R:0"}, "must be >= 1"),
    ({"queue_policy": "timeout=5"}, "unknown key 'timeout'"),
    ({"queue_policy": "action=delay,max_queue_size=3"}, "action=delay needs timeout_us"),
    ({"priority_levels": 2, "default_priority_level": 3}, "outside [1, 2]"),
    ({"dynamic_batching": False, "max_queue_delay_us": 100}, "--no-dynamic-batching"),
    ({"max_batch_size": 0, "preferred_batch_sizes": "4"}, "turns batching off"),
    ({"max_batch_size": -1}, "must be >= 0"),
    ({"execution_env": "env.zip"}, "conda-pack archive"),
    ({"instances": "two"}, "expected an integer"),
    ({"max_batchsize": 3}, "unknown option"),
])
def test_bad_options_are_one_line_errors(values, message):
    with pytest.raises(UserInputError, match=message.replace("[", r"\[").replace("]", r"\]")) as e:
        from_mapping(values)
    assert "\n" not in e.value.one_line()


# --------------------------------------------------------------------------- configs
def _plan(**changes) -> ModelPlan:
    plan = ModelPlan(name="m", role="model", backend="onnxruntime", platform="onnxruntime_onnx",
                     default_model_filename="model.onnx", max_batch_size=8,
                     inputs=[TensorPlan("x", "float32", [-1, 3]), TensorPlan("n", "int64", [1], reshape=[])],
                     outputs=[TensorPlan("y", "float16", [4], label_filename="labels.txt")],
                     instance_kind="KIND_GPU", instance_count=2,
                     rate_limit=(RateLimitResource("R", 2, True),), rate_limit_priority=1,
                     dynamic_batching={"preferred": [4, 8], "max_queue_delay_us": 100, "priority_levels": 2,
                                       "default_priority_level": 2, "queue_policy": QueuePolicy(10, 5, "reject")},
                     gpu_accelerators=[("tensorrt", {"precision_mode": "FP16"})],
                     warmup=[cfg_mod.Warmup("w", 2, {"x": ("float32", [5, 3], "x"), "n": ("int64", [1], "n")})],
                     parameters={"EXECUTION_ENV_PATH": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"}, response_cache=True)
    for k, v in changes.items():
        setattr(plan, k, v)
    return plan


def test_every_option_lands_in_the_schema_and_reads_back():
    cfg = cfg_mod.build(_plan())
    text = cfg_mod.to_text(cfg)
    back = text_format.Parse(text, mc.ModelConfig())
    assert back == cfg and cfg_mod.problems(back) == []
    assert back.input[1].HasField("reshape") and list(back.input[1].reshape.shape) == []
    assert back.output[0].data_type == mc.TYPE_FP16 and back.output[0].label_filename == "labels.txt"
    group = back.instance_group[0]
    assert group.kind == mc.ModelInstanceGroup.KIND_GPU and group.count == 2
    assert getattr(group.rate_limiter.resources[0], "global") and group.rate_limiter.priority == 1
    db = back.dynamic_batching
    assert list(db.preferred_batch_size) == [4, 8] and db.max_queue_delay_microseconds == 100
    assert db.priority_levels == 2 and db.default_priority_level == 2
    assert db.default_queue_policy.max_queue_size == 5
    acc = back.optimization.execution_accelerators.gpu_execution_accelerator[0]
    assert acc.name == "tensorrt" and acc.parameters["precision_mode"] == "FP16"
    assert back.model_warmup[0].inputs["x"].input_data_file == "x"
    assert back.parameters["EXECUTION_ENV_PATH"].string_value == "$$TRITON_MODEL_DIRECTORY/env.tar.gz"
    assert back.response_cache.enable
    assert "global: true" in text and text.startswith("#")


def test_text_format_is_a_real_validator():
    with pytest.raises(UserInputError, match="oneof"):   # schedulers exclude each other (FACTS.md)
        cfg_mod.parse('name: "m"\ndynamic_batching { }\nensemble_scheduling { }\n')
    with pytest.raises(UserInputError, match="not a valid Triton ModelConfig"):
        cfg_mod.parse('name: "m"\nmax_batch: 3\n')
    with pytest.raises(UserInputError, match="not a valid Triton ModelConfig"):
        cfg_mod.parse('name: "m"\ninput { name: "x" data_type: TYPE_FLOAT32 dims: 1 }\n')


@pytest.mark.parametrize("changes, message", [
    ({"inputs": [TensorPlan("x", "float32", [0])]}, "must each be >= 1 or -1"),
    ({"dynamic_batching": {"preferred": [16]}}, "preferred batch size 16"),
    ({"dynamic_batching": {"preferred": [], "priority_levels": 2, "default_priority_level": 3}},
     "default priority level"),
    ({"instance_kind": None}, "no instance group"),
    ({"max_batch_size": 0, "dynamic_batching": None, "warmup": []}, "empty reshape without batching"),
    ({"warmup": [cfg_mod.Warmup("w", 1, {"x": ("float32", [-1, 3], "x")})]}, "needs concrete dims"),
])
def test_load_time_rules(changes, message):
    problems = cfg_mod.problems(cfg_mod.build(_plan(**changes)))
    assert any(message in p for p in problems), problems


def test_a_sequence_batcher_with_implicit_state_and_its_rules():
    from navigator.triton.config import SequencePlan, StatePlan

    state = StatePlan("h0", "hn", "float32", [1, 1, 8])
    plan = _plan(max_batch_size=0, dynamic_batching=None, warmup=[], inputs=[TensorPlan("x", "float32", [1, -1, 4])],
                 sequence=SequencePlan([state], strategy="oldest", max_candidate_sequences=2, idle_us=1000))
    cfg = cfg_mod.build(plan)
    assert not cfg.HasField("dynamic_batching") and cfg.sequence_batching.oldest.max_candidate_sequences == 2
    (st,) = cfg.sequence_batching.state
    assert (st.input_name, st.output_name, list(st.dims)) == ("h0", "hn", [1, 1, 8])
    assert st.initial_state[0].zero_data and list(st.initial_state[0].dims) == [1, 1, 8]
    assert cfg_mod.problems(cfg_mod.parse(text_format.MessageToString(cfg))) == []
    direct = cfg_mod.build(_plan(max_batch_size=0, dynamic_batching=None, warmup=[],
                                 inputs=[TensorPlan("x", "float32", [1, -1, 4])],
                                 sequence=SequencePlan([state], strategy="direct")))
    assert direct.sequence_batching.HasField("direct")
    bad = mc.ModelConfig()
    bad.CopyFrom(cfg)
    bad.input.add(name="h0", data_type=mc.TYPE_FP32, dims=[1, 1, 8])
    bad.sequence_batching.state[0].initial_state[0].dims[:] = [1, -1, 8]
    bad.sequence_batching.state[0].initial_state[0].zero_data = False
    problems = cfg_mod.problems(bad)
    for needle in ("also a config input", "must be fixed", "needs zero_data or data_file"):
        assert any(needle in p for p in problems), problems


def test_signature_and_interface_differences():
    cfg = cfg_mod.build(_plan())
    assert cfg_mod.signature_problems(cfg, [("x", "float32", [-1, 3]), ("n", "int64", [1])],
                                      [("y", "float16", [4])]) == []
    wrong = cfg_mod.signature_problems(cfg, [("x", "float64", [-1, 3]), ("n", "int64", [2])], [("z", "float16", [4])])
    assert any("TYPE_FP32, the signature says float64" in p for p in wrong)
    assert any("dims [1], the signature gives [2]" in p for p in wrong)
    assert any("output 'z' is missing" in p for p in wrong)
    other = cfg_mod.build(_plan(max_batch_size=4, inputs=[TensorPlan("x", "float32", [-1, 4])]))
    diffs = cfg_mod.io_differences(cfg, other)
    assert "max_batch_size 8 -> 4" in diffs and any("input 'x'" in d for d in diffs)


def test_dims_from_signature_shapes():
    assert cfg_mod.expected_dims([-1, 16, 3], True) == ([16, 3], None)
    assert cfg_mod.expected_dims([-1, -1], False) == ([-1, -1], None)
    assert cfg_mod.expected_dims([-1], True) == ([1], [])
    assert cfg_mod.expected_dims([], False) == ([1], None)   # a rank-0 input (a sample rate) without batching
    assert cfg_mod.triton_dtype("bool") == "TYPE_BOOL" and cfg_mod.triton_dtype("bfloat16") == "TYPE_BF16"
    with pytest.raises(UserInputError, match="no Triton data type"):
        cfg_mod.triton_dtype("complex64")


# --------------------------------------------------------------------------- ensemble rules
def _model(name, inputs, outputs, mbs=8):
    cfg = mc.ModelConfig(name=name, backend="python", max_batch_size=mbs)
    for n, dt, dims in inputs:
        cfg.input.add(name=n, data_type=mc.DataType.Value(dt), dims=dims)
    for n, dt, dims in outputs:
        cfg.output.add(name=n, data_type=mc.DataType.Value(dt), dims=dims)
    cfg.instance_group.add(count=1)
    return cfg


def _ensemble(steps, inputs=(("raw", "TYPE_UINT8", [3]),), outputs=(("label", "TYPE_INT64", [1]),), mbs=8):
    cfg = mc.ModelConfig(name="ens", platform="ensemble", max_batch_size=mbs)
    for n, dt, dims in inputs:
        cfg.input.add(name=n, data_type=mc.DataType.Value(dt), dims=dims)
    for n, dt, dims in outputs:
        cfg.output.add(name=n, data_type=mc.DataType.Value(dt), dims=dims)
    for model, imap, omap in steps:
        s = cfg.ensemble_scheduling.step.add(model_name=model, model_version=-1)
        s.input_map.update(imap)
        s.output_map.update(omap)
    return cfg


STEPS = {"pre": _model("pre", [("raw", "TYPE_UINT8", [3])], [("x", "TYPE_FP32", [3])]),
         "core": _model("core", [("x", "TYPE_FP32", [3])], [("y", "TYPE_FP32", [4])]),
         "post": _model("post", [("y", "TYPE_FP32", [4])], [("label", "TYPE_INT64", [1])])}
GOOD = [("pre", {"raw": "raw"}, {"x": "t_x"}), ("core", {"x": "t_x"}, {"y": "t_y"}),
        ("post", {"y": "t_y"}, {"label": "label"})]


def test_a_valid_ensemble_passes():
    assert ensemble.check(_ensemble(GOOD), STEPS) == []
    shuffled = [GOOD[2], GOOD[0], GOOD[1]]          # step order does not matter, data flow does
    assert ensemble.check(_ensemble(shuffled), STEPS) == []


def _spare_output(ens, steps) -> None:
    """The pre step writes a tensor nothing reads."""
    steps["pre"].output.add(name="spare", data_type=mc.TYPE_FP32, dims=[1])
    ens.ensemble_scheduling.step[0].output_map.update({"spare": "t_spare"})


@pytest.mark.parametrize("mutate, message", [
    (lambda e, s: e.input.add(name="extra", data_type=mc.TYPE_FP32, dims=[1]), "'extra' is not used by any step"),
    (lambda e, s: e.output.add(name="more", data_type=mc.TYPE_FP32, dims=[1]), "'more' is not produced"),
    (lambda e, s: e.ensemble_scheduling.step[1].output_map.update({"y": "t_x"}), "more than once"),
    (lambda e, s: e.instance_group.add(count=1), "no instance_group"),
    (lambda e, s: e.model_warmup.add(name="w"), "no model_warmup"),
    (lambda e, s: setattr(e.optimization.cuda, "graphs", True), "no optimization"),
    (lambda e, s: setattr(e, "max_batch_size", 16), "exceeds step 'pre'"),
    (lambda e, s: _spare_output(e, s), "'t_spare' written by step 'pre' is never used"),
    (lambda e, s: s["core"].input.add(name="mask", data_type=mc.TYPE_FP32, dims=[3]),
     "'mask' of step 'core' is not mapped"),
    (lambda e, s: s["core"].input[0].__setattr__("data_type", mc.TYPE_FP16), "inconsistent data type"),
    (lambda e, s: s["core"].input[0].dims.append(2), "inconsistent shape"),
    (lambda e, s: e.ensemble_scheduling.step[2].input_map.update({"y": "nowhere"}), "never runs"),
    (lambda e, s: e.ensemble_scheduling.step.add(model_name="ghost", input_map={"a": "raw"}, output_map={"b": "c"}),
     "not part of this repository write"),
])
def test_rule_violations_are_named(mutate, message):
    steps = {k: mc.ModelConfig.FromString(v.SerializeToString()) for k, v in STEPS.items()}
    ens = _ensemble(GOOD)
    mutate(ens, steps)
    violations = ensemble.check(ens, steps)
    assert any(message in v for v in violations), violations
    with pytest.raises(UserInputError, match="breaks Triton's ensemble rules"):
        ensemble.raise_if_invalid(ens, steps)


def test_batching_and_non_batching_steps_compare_in_full():
    steps = dict(STEPS)
    steps["core"] = _model("core", [("x", "TYPE_FP32", [-1, 3])], [("y", "TYPE_FP32", [-1, 4])], mbs=0)
    assert ensemble.check(_ensemble(GOOD), steps) == []


def _scalar_steps(step_reshape: bool):
    """post returns a per-row scalar 'n': its config dims [1], with or without reshape []."""
    steps = {k: mc.ModelConfig.FromString(v.SerializeToString()) for k, v in STEPS.items()}
    post = steps["post"]
    post.output.add(name="n", data_type=mc.TYPE_INT32, dims=[1])
    if step_reshape:
        post.output[-1].reshape.SetInParent()
    return steps


def test_ensemble_tensors_compare_with_the_steps_dims_not_their_reshape():
    """As Triton core does (ensemble_utils.cc; the real 2.51 server refused the first case
    with "inconsistent shape: [-1] is inferred from model ens while [-1,1] ..."): an
    ensemble's own tensor is read through its reshape, a step's through its dims."""
    good = [GOOD[0], GOOD[1], ("post", {"y": "t_y"}, {"label": "label", "n": "n"})]
    outputs = (("label", "TYPE_INT64", [1]), ("n", "TYPE_INT32", [1]))
    ens = _ensemble(good, outputs=outputs)
    assert ensemble.check(ens, _scalar_steps(step_reshape=True)) == []
    assert ensemble.check(ens, _scalar_steps(step_reshape=False)) == []
    ens.output[1].reshape.SetInParent()        # the reshape on the ensemble too: Triton refuses it
    violations = ensemble.check(ens, _scalar_steps(step_reshape=True))
    assert len(violations) == 1 and "inconsistent shape, [-1] from ensemble output" in violations[0] and \
        "not its reshape" in violations[0], violations


def test_pre_to_post_edges_are_checked_as_data_flow():
    steps = {k: mc.ModelConfig.FromString(v.SerializeToString()) for k, v in STEPS.items()}
    steps["pre"].output.add(name="scale", data_type=mc.TYPE_FP32, dims=[1])
    steps["post"].input.add(name="scale", data_type=mc.TYPE_FP32, dims=[1])
    edge = [("pre", {"raw": "raw"}, {"x": "t_x", "scale": "t_scale"}), GOOD[1],
            ("post", {"y": "t_y", "scale": "t_scale"}, {"label": "label"})]
    assert ensemble.check(_ensemble(edge), steps) == []
    steps["post"].input[1].data_type = mc.TYPE_FP16      # negative control: the edge is checked like any other
    assert any("'t_scale': inconsistent data type" in v for v in ensemble.check(_ensemble(edge), steps))


@pytest.mark.parametrize("shapes, batching, like, dims, reshape", [
    ([(2, 96, 120, 3), (3, 128, 80, 3)], True, None, [-1, -1, 3], None),   # H, W vary; channels do not
    ([(2, 20, 4), (8, 20, 4)], True, None, [20, 4], None),                 # only the batch varies
    ([(2, 20, 4)], True, None, [-1, -1], None),                            # one example: nothing is known
    ([(2, 3, 128, 128)], True, [3, 128, 128], [3, 128, 128], None),        # the model fixes them
    ([(2, 3, 64, 64), (1, 3, 32, 32)], True, [3, -1, -1], [3, -1, -1], None),
    ([(2, 3, 128, 128), (1, 3, 96, 128)], True, [3, 128, 128], [3, 96, 128], None),   # 96: the rules refuse it
    ([(2,), (5,)], True, None, [1], []),                                   # a per-row scalar
    ([(4, 8), (4, 8)], False, None, [4, 8], None),                         # no batching: full shapes
])
def test_dims_derived_from_several_examples(shapes, batching, like, dims, reshape):
    import numpy as np

    arrays = [np.zeros(s, np.float32) for s in shapes]
    assert ensemble.derive_dims(arrays, batching, like) == (dims, reshape)


def test_a_scalar_without_batching_cannot_be_served():
    import numpy as np

    with pytest.raises(UserInputError, match="without batching"):
        ensemble.derive_dims([np.zeros((), np.float32)], False)


def test_pack_env_pins_the_step_files_imports(tmp_path):
    """The step file's third-party imports are pinned (the version installed here, which the
    emitter probed the file with); the standard library and the file's own folder are not
    packages; numpy stays the stub's numpy<2; what is not installed is said."""
    from importlib import metadata

    (tmp_path / "helpers.py").write_text("X = 1\n")
    step = tmp_path / "step.py"
    step.write_text("import os, json\nimport numpy as np\nfrom yaml import safe_load\nimport helpers\n"
                    "def preprocess(x):\n    import not_a_real_module_xyz\n    return {}\n")
    assert python_backend.imported_modules(step) == ["numpy", "yaml", "helpers", "not_a_real_module_xyz"]
    notes: list[str] = []
    reqs = python_backend.requirements("function", {"numpy": "2.4.6"}, [step], notes)
    assert reqs == ["numpy<2", f"PyYAML=={metadata.version('PyYAML')}"]
    assert any("helpers, a module of its own folder" in n for n in notes)
    assert any("not_a_real_module_xyz, which is not installed here" in n for n in notes)
    script = python_backend.pack_env_script("m_pre", reqs, numpy_note=" (the workspace ran numpy 2.4.6)")
    assert 'NUMPY_SPEC="${NUMPY_SPEC:-numpy<2}"' in script and '"PyYAML==' in script
    assert "the workspace ran numpy 2.4.6" in script
    r = subprocess.run(["bash", "-n"], input=script, text=True, capture_output=True)
    assert r.returncode == 0, r.stderr


def test_a_package_that_needs_numpy_2_is_named(monkeypatch):
    from importlib import metadata

    monkeypatch.setattr(metadata, "requires", lambda dist: ["numpy>=2; python_version>='3.9'"])
    note = python_backend._numpy_conflict("opencv-python", "4.12.0.88")
    assert note and "requires numpy>=2" in note[0] and "numpy<2" in note[0]
    monkeypatch.setattr(metadata, "requires", lambda dist: ["numpy>=1.21"])
    assert python_backend._numpy_conflict("scipy", "1.11") == []


# --------------------------------------------------------------------------- names, template
def test_pytorch_backend_names():
    assert backends.pytorch_names(["x"], ["INPUT__0"], "INPUT") == (["INPUT__0"], False)
    assert backends.pytorch_names(["a", "b"], ["a", "b"], "INPUT") == (["INPUT__0", "INPUT__1"], True)
    assert backends.pytorch_names(["a", "b"], ["x__1", "x__3"], "INPUT")[1] is True   # indices must be 0..n-1
    assert backends.serving_for("torch_export", python_backend=False, aoti_native=False).backend == "python"
    assert backends.serving_for("aoti", python_backend=False, aoti_native=True).platform == "torch_aoti"
    with pytest.raises(UserInputError, match="cannot be served"):
        backends.serving_for("torch", python_backend=False, aoti_native=False)
    with pytest.raises(UserInputError, match="cannot load format tensorrt"):
        backends.serving_for("tensorrt", python_backend=True, aoti_native=False)


def test_model_py_settings_survive_hostile_names():
    nasty = TensorPlan(name="x'''\"\\n", dtype="float32", dims=[1], feed="y\"); import os #")
    settings = python_backend.settings_for("onnx", "model.onnx", [nasty], [nasty], key="onnx")
    text = python_backend.render_model_py(settings)
    tree = ast.parse(text)
    literal = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SETTINGS")
    assert ast.literal_eval(literal) == settings
    assert "/" not in str(settings["artifact"])


def test_importing_navigator_triton_imports_no_protobuf():
    code = ("import sys, navigator.triton, navigator.cli.triton; "
            "bad = [m for m in sys.modules if m.startswith(('tritonclient', 'google.protobuf', 'numpy'))]; "
            "print(bad); raise SystemExit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_defaults():
    o = TritonOptions()
    assert o.formats == ("best",) and o.kind == "auto" and o.dynamic_batching and o.warmup
