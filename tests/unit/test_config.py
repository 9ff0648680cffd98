"""Unit tests for navigator.config: from_mapping, load_yaml, resolved()."""

from __future__ import annotations

import pytest

from navigator.config import NavigatorConfig, from_mapping, load_yaml
from navigator.errors import UserInputError


def err(values, **kw) -> str:
    with pytest.raises(UserInputError) as e:
        from_mapping(values, **kw)
    return str(e.value)


# --- shapes and profiles -----------------------------------------------------

def test_cli_strings_shapes_min_opt_max():
    c = from_mapping({"shapes": "ids:8x16", "min_shapes": "ids:1x4", "opt_shapes": "ids:4x8",
                      "max_shapes": "ids:32x64"})
    assert c.shape_profiles == ({"ids": {"min": [1, 4], "opt": [4, 8], "max": [32, 64]}},)
    assert c.shapes == ({"ids": (8, 16)},)


def test_opt_defaults_to_shapes_then_max():
    c = from_mapping({"shapes": "ids:8x16", "min_shapes": "ids:1x4", "max_shapes": "ids:32x64"})
    assert c.shape_profiles == ({"ids": {"min": [1, 4], "opt": [8, 16], "max": [32, 64]}},)
    c = from_mapping({"min_shapes": "ids:1x4", "max_shapes": "ids:32x64"})
    assert c.shape_profiles == ({"ids": {"min": [1, 4], "opt": [32, 64], "max": [32, 64]}},)
    assert c.shapes == ({"ids": (32, 64)},)          # samples follow the opt shapes


def test_only_shapes_gives_no_profile():
    c = from_mapping({"shapes": "ids:8x16,mask:8x16"})
    assert c.shape_profiles is None
    assert c.shapes == ({"ids": (8, 16), "mask": (8, 16)},)


def test_two_profiles_from_repeated_options():
    c = from_mapping({"min_shapes": ["ids:1x4", "ids:1x64"], "max_shapes": ["ids:8x64", "ids:8x128"]})
    assert c.shape_profiles == ({"ids": {"min": [1, 4], "opt": [8, 64], "max": [8, 64]}},
                                {"ids": {"min": [1, 64], "opt": [8, 128], "max": [8, 128]}})
    assert c.shapes == ({"ids": (8, 64)}, {"ids": (8, 128)})
    assert err({"min_shapes": ["ids:1x4", "ids:1x64"], "max_shapes": "ids:8x64"}) == (
        "--max-shapes given 1 times but other profile options 2 times; give each once per profile")


def test_dict_spellings_of_shapes():
    c = from_mapping({"min_shapes": {"ids": [1, 4]}, "max_shapes": {"ids": "32x64"}, "shapes": {"ids": (8, 16)}})
    assert c.shape_profiles == ({"ids": {"min": [1, 4], "opt": [8, 16], "max": [32, 64]}},)
    assert err({"shapes": {"ids": [8, 0]}}) == "shapes: shape of 'ids' must be a list of positive integers, got [8, 0]"
    assert err({"shapes": {"ids": [8, True]}}) == (
        "shapes: shape of 'ids' must be a list of positive integers, got [8, True]")
    assert err({"shapes": 5}) == "shapes: expected 'name:1x3x224x224' or a mapping, got int"


def test_min_greater_than_max():
    assert err({"min_shapes": "ids:1x64", "max_shapes": "ids:8x16"}) == (
        "shape profile for 'ids': min 1x64 > max 8x16 at dim 1")


# --- keys and types ---------------------------------------------------------

def test_unknown_keys_list_valid_ones():
    msg = err({"atoll": 1e-3, "bogus": 1})
    assert msg.startswith("config: unknown option(s) atoll, bogus; valid: ")
    valid = msg.split("valid: ", 1)[1].split(", ")
    assert valid == sorted(valid)
    assert {"atol", "shapes", "min_shapes", "max_shapes", "opt_shapes", "targets", "batch_dim"} <= set(valid)
    assert err({"bogus": 1}, source="--config-path c.yaml").startswith("--config-path c.yaml: unknown option(s) bogus")


def test_wrong_types():
    assert err({"sample_count": True}) == "sample_count: expected a number, got a boolean"
    assert err({"timeout": False}) == "timeout: expected a number, got a boolean"
    assert err({"sample_count": "4"}) == "sample_count: expected int, got str ('4')"
    assert err({"max_batch_size": 2.5}) == "max_batch_size: expected int, got float (2.5)"
    assert err({"timeout": "10"}) == "timeout: expected int or float, got str ('10')"
    assert err({"no_profile": "yes"}) == "no_profile: expected bool, got str ('yes')"
    assert err({"sample_count": 0}) == "sample_count: must be >= 1, got 0"
    assert err({"batch_dim": -1}) == "batch_dim: must be >= 0, got -1"
    assert err({"timeout": 0}) == "timeout: must be a finite number > 0 of seconds, got 0"
    assert err({"device": "tpu"}) == "device: 'tpu' is not one of auto, cpu, cuda"
    assert err({"error_stat": "p99"}) == "error_stat: 'p99' is not one of elemwise, max, mean, median, quantile"
    assert err({"target_precisions": "fp32,fp12"}) == (
        "target_precisions: unknown precision 'fp12'; valid: fp32, fp16, bf16, int8")
    assert err({"targets": ""}) == "targets: empty list"
    assert from_mapping({"timeout": 5}).timeout == 5.0


def test_none_values_are_ignored_and_paths_are_strings(tmp_path):
    c = from_mapping({"timeout": None, "workdir": tmp_path})
    assert c.timeout is None and c.workdir == str(tmp_path)


def test_target_formats_alias_and_ignored_cli_keys():
    c = from_mapping({"target_formats": "onnx, openvino", "config_path": "x.yaml", "verbose": True})
    assert c.targets == ("onnx", "openvino")
    assert from_mapping({"targets": ["onnx"]}).targets == ("onnx",)


def test_batch_dim_and_no_batching_conflict():
    msg = "--batch-dim and --no-batching exclude each other"
    assert err({"batch_dim": 1, "no_batching": True}) == msg
    assert err({"no_batching": True}, base=NavigatorConfig(batch_dim=1)) == msg
    assert err({"batch_dim": 1}, base=NavigatorConfig(no_batching=True)) == msg
    c = from_mapping({"batch_dim": 0, "no_batching": False})
    assert (c.batch_dim, c.no_batching) == (0, False)


# --- tolerances and compare ---------------------------------------------------

def test_atol_rtol_merging():
    c = from_mapping({"atol": "1e-4,logits:1e-3", "rtol": 1e-2})
    assert c.atol == {"": 1e-4, "logits": 1e-3}
    assert c.rtol == {"": 1e-2}
    c2 = c.with_options(atol={"probs": 0.5})
    assert c2.atol == {"": 1e-4, "logits": 1e-3, "probs": 0.5}
    c3 = c2.with_options(atol=2e-4)
    assert c3.atol == {"": 2e-4, "logits": 1e-3, "probs": 0.5}
    assert err({"atol": True}) == "atol: expected a number or 'name:value', got a boolean"
    assert err({"atol": "-1"}).startswith("--atol: negative tolerance '-1'")


def test_atol_mapping_from_yaml_strings(tmp_path):
    # YAML 1.1 reads 1e-3 (no dot) as a string
    p = tmp_path / "c.yaml"
    p.write_text("atol:\n  '': 1e-5\n  logits: 1e-3\nrtol: 1e-2\n")
    c = from_mapping(load_yaml(p))
    assert c.atol == {"": 1e-5, "logits": 1e-3}
    assert c.rtol == {"": 1e-2}
    assert err({"atol": {"logits": [1]}}) == "atol: tolerance of 'logits' must be a number, got [1]"
    assert err({"atol": {"": True}}) == "atol: tolerance of 'the default' must be a number, got True"


def test_compare_forms():
    c = from_mapping({"compare": "logits:tolerance,idx:mismatch_fraction=0.01,*:exact"})
    assert c.compare == {"logits": ("tolerance", None), "idx": ("mismatch_fraction", 0.01), "*": ("exact", None)}
    c = from_mapping({"compare": {"idx": ["mismatch_fraction", 0.02], "emb": ["cosine", 0.99], "mask": ["exact"],
                                  "*": "skip", "p": "cosine=0.9"}})
    assert c.compare == {"idx": ("mismatch_fraction", 0.02), "emb": ("cosine", 0.99), "mask": ("exact", None),
                         "*": ("skip", None), "p": ("cosine", 0.9)}
    merged = c.with_options(compare="idx:exact")
    assert merged.compare["idx"] == ("exact", None) and merged.compare["emb"] == ("cosine", 0.99)
    assert err({"compare": 3}) == "compare: expected 'name:mode[=value]' or a mapping"


def test_value_ranges_and_dtypes():
    c = from_mapping({"value_ranges": "ids:0,1000", "dtypes": "ids:int32,x:fp16"})
    assert c.value_ranges == {"ids": (0.0, 1000.0)}
    assert c.dtypes == {"ids": "int32", "x": "float16"}
    c = from_mapping({"value_ranges": {"ids": [0, 10]}, "dtypes": {"x": "half"}})
    assert c.value_ranges == {"ids": (0.0, 10.0)} and c.dtypes == {"x": "float16"}
    assert err({"value_ranges": {"ids": [10, 0]}}) == ("value_ranges: 'ids' needs [low, high] with low < high, "
                                                       "got [10, 0]")


def test_verify_batch_sizes():
    assert from_mapping({"verify_batch_sizes": "4,1"}).verify_batch_sizes == (1, 4)
    assert from_mapping({"verify_batch_sizes": [2, 1]}).verify_batch_sizes == (1, 2)
    assert from_mapping({"verify_batch_sizes": 3}).verify_batch_sizes == (3,)
    assert err({"verify_batch_sizes": 2.5}) == "verify_batch_sizes: expected '1,8' or a list of integers, got float"


# --- load_yaml / resolved -----------------------------------------------------

def test_load_yaml(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("sample-count: 4\ntargets: [onnx]\n")
    assert load_yaml(p) == {"sample_count": 4, "targets": ["onnx"]}
    p.write_text("")
    assert load_yaml(p) == {}


def test_load_yaml_errors(tmp_path):
    def yerr(path):
        with pytest.raises(UserInputError) as e:
            load_yaml(path)
        return str(e.value)

    missing = tmp_path / "nope.yaml"
    assert yerr(missing) == f"--config-path {missing}: no such file"
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    assert yerr(bad).startswith(f"--config-path {bad}: not valid YAML (")
    assert "\n" not in yerr(bad)
    lst = tmp_path / "list.yaml"
    lst.write_text("- a\n- b\n")
    assert yerr(lst) == f"--config-path {lst}: expected a mapping of options at the top level"


def test_resolved_defaults():
    r = NavigatorConfig().resolved()
    assert (r.workdir, r.target_precisions, r.device, r.sample_count, r.max_batch_size, r.error_stat, r.timeout,
            r.profile_budget_s, r.seed) == ("navigator_workdir", ("fp32",), "auto", None, 64, "elemwise", 600.0,
                                            20.0, 0)
    assert r.targets is None and r.shape_profiles is None
    r = from_mapping({"sample_count": 5, "device": "cpu"}).resolved()
    assert (r.sample_count, r.device, r.max_batch_size) == (5, "cpu", 64)


def test_to_dict_lists():
    d = from_mapping({"targets": "onnx", "verify_batch_sizes": "1,2"}).to_dict()
    assert d["targets"] == ["onnx"] and d["verify_batch_sizes"] == [1, 2] and d["atol"] is None


def test_output_kinds_parse_from_the_flag_and_a_mapping_and_refuse_unknown_kinds():
    from navigator.config import from_mapping
    from navigator.errors import UserInputError

    assert from_mapping({"output_kinds": "probs:probabilities,output0:detections"}).output_kinds == {
        "probs": "probabilities", "output0": "detections"}
    assert from_mapping({"output_kinds": {"emb": "Embedding"}}).output_kinds == {"emb": "embedding"}
    with pytest.raises(UserInputError, match="unknown output kind 'boxes'.*probabilities"):
        from_mapping({"output_kinds": "out:boxes"})
    with pytest.raises(UserInputError, match="output_kinds: expected"):
        from_mapping({"output_kinds": ["probs"]})


def test_every_option_has_one_reader():
    """from_mapping reads each option through its entry of one table: every field has one (the
    shape family is read together), and a key without one is refused as unknown."""
    from navigator import config as config_mod

    assert set(config_mod._READERS) | {"shapes"} == set(config_mod._FIELDS)
    with pytest.raises(UserInputError, match="unknown option"):
        config_mod.from_mapping({"no_such_option": 1})
    with pytest.raises(UserInputError, match=r"jobs: must be >= 0 \(0: one per free core"):
        config_mod.from_mapping({"jobs": -1})
    with pytest.raises(UserInputError, match="trt_workspace_mb: must be >= 1 MiB, got 0"):
        config_mod.from_mapping({"trt_workspace_mb": 0})
    assert config_mod.from_mapping({"atol": 1e-3, "dtypes": {"x": "fp16"}}).dtypes == {"x": "float16"}
