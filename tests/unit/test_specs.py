"""Unit tests for navigator.specs (the --shapes/--dtypes/--compare/... parsers)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from navigator.errors import UserInputError
from navigator.specs import (
    MAX_DIM,
    format_name,
    format_shape,
    merge_profile,
    parse_batch_sizes,
    parse_compare,
    parse_dtypes,
    parse_shapes,
    parse_tolerance,
    parse_value_ranges,
)

PARSERS = [
    parse_shapes,
    parse_value_ranges,
    parse_dtypes,
    parse_compare,
    parse_tolerance,
    parse_batch_sizes,
]

FUZZ = settings(max_examples=300, deadline=None)


def _err(fn, text, *args):
    with pytest.raises(UserInputError) as info:
        fn(text, *args)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


# --------------------------------------------------------------------------
# parse_shapes


def test_shapes_good():
    assert parse_shapes("input:1x3x224x224,other:1x16") == {
        "input": (1, 3, 224, 224),
        "other": (1, 16),
    }
    assert parse_shapes("  a : 4 ,  b:7  ") == {"a": (4,), "b": (7,)}
    assert parse_shapes("s:[]") == {"s": ()}
    assert parse_shapes(f"x:{MAX_DIM}") == {"x": (MAX_DIM,)}
    assert parse_shapes("x:007") == {"x": (7,)}


def test_shapes_quoted_names():
    assert parse_shapes("'x:0':1x2,\"a,b\":3") == {"x:0": (1, 2), "a,b": (3,)}
    assert parse_shapes("'it\"s':1") == {'it"s': (1,)}
    assert parse_shapes("\"it's\":1") == {"it's": (1,)}
    assert parse_shapes("'with space':2") == {"with space": (2,)}


def test_shapes_preserve_order():
    assert list(parse_shapes("z:1,a:2,m:3")) == ["z", "a", "m"]


def test_shapes_option_name_in_message():
    msg = _err(parse_shapes, "a:0", "--min-shapes")
    assert msg.startswith("--min-shapes:")


@pytest.mark.parametrize(
    "text, token",
    [
        ("input:1xx3", "'x3'"),
        ("input:1xax3", "'a'"),
        ("input:1x", "input:1x"),
        ("input:x3", "'x3'"),
        ("input:-1", "'-1'"),
        ("input:1.5", "'1.5'"),
        ("input:1X3", "'1X3'"),
        ("input:", "'input:'"),
        ("input", "'input'"),
        ("input 1x3", "'1x3'"),
        (":1x3", "':1x3'"),
        ("a:1,,b:2", "'a:1,,b:2'"),
        (",a:1", "',a:1'"),
        ("a:1,", "'a:1,'"),
        ("a:1 b:2", "'b'"),
        ("a:'1x3'", "'1x3'"),
        ("'':1", "'':1"),
        ("'x:0:1", "\"'x:0:1\""),
        ("a:[ ]", "'['"),
    ],
)
def test_shapes_errors(text, token):
    msg = _err(parse_shapes, text)
    assert msg.startswith("--shapes:")
    assert token in msg


def test_shapes_brief_example_message():
    msg = _err(parse_shapes, "input:1xx3")
    assert "bad dimension 'x3' in 'input:1xx3'" in msg
    assert "input:1x3x224x224" in msg


def test_shapes_zero_size():
    msg = _err(parse_shapes, "input:1x0x3")
    assert "zero-size" in msg and "'0'" in msg


def test_shapes_too_large():
    msg = _err(parse_shapes, f"x:{MAX_DIM + 1}")
    assert str(MAX_DIM + 1) in msg
    # longer than Python's int-from-str digit limit: still a UserInputError
    _err(parse_shapes, "x:" + "9" * 5000)


def test_shapes_duplicate():
    msg = _err(parse_shapes, "a:1,b:2,a:3")
    assert "duplicate" in msg and "'a'" in msg
    # a quoted and a bare spelling are the same name
    _err(parse_shapes, "a:1,'a':2")


@pytest.mark.parametrize("text", ["", "   ", "\t\n"])
def test_shapes_empty(text):
    assert "empty" in _err(parse_shapes, text)


# --------------------------------------------------------------------------
# parse_value_ranges


def test_value_ranges_good():
    assert parse_value_ranges("ids:0,1000,mask:0,2") == {
        "ids": (0.0, 1000.0),
        "mask": (0.0, 2.0),
    }
    assert parse_value_ranges("x:-1,1e-3") == {"x": (-1.0, 0.001)}
    assert parse_value_ranges("x : .5 , 2.") == {"x": (0.5, 2.0)}
    assert parse_value_ranges("'a:b':-1E2,+3") == {"a:b": (-100.0, 3.0)}


@pytest.mark.parametrize(
    "text, token",
    [
        ("ids:5,1", "5"),
        ("ids:1,1", "'ids:1,1'"),
        ("ids:nan,1", "'nan'"),
        ("ids:0,inf", "'inf'"),
        ("ids:0,1e999", "'1e999'"),
        ("ids:0,abc", "'abc'"),
        ("ids:0", "end of value"),
        ("ids:0,", "end of value"),
        ("ids:0,1,", "trailing"),
        ("ids:0,1,mask", "'mask'"),
        ("ids:0,1,ids:2,3", "'ids'"),
        ("ids:0 1", "'1'"),
        ("ids:'0',1", "'0'"),
        ("ids:1_0,20", "'1_0'"),
    ],
)
def test_value_ranges_errors(text, token):
    msg = _err(parse_value_ranges, text)
    assert msg.startswith("--value-ranges:")
    assert token in msg


def test_value_ranges_lo_hi_message():
    msg = _err(parse_value_ranges, "ids:5,1")
    assert "'ids:5,1'" in msg and "5" in msg and "1" in msg


# --------------------------------------------------------------------------
# parse_dtypes


def test_dtypes_good_and_aliases():
    assert parse_dtypes("ids:int32,x:float16") == {"ids": "int32", "x": "float16"}
    got = parse_dtypes(
        "a:fp32,b:float,c:fp16,d:half,e:bf16,f:fp64,g:double,h:BOOL,i:uint64,j:Int8"
    )
    assert got == {
        "a": "float32",
        "b": "float32",
        "c": "float16",
        "d": "float16",
        "e": "bfloat16",
        "f": "float64",
        "g": "float64",
        "h": "bool",
        "i": "uint64",
        "j": "int8",
    }


def test_dtypes_unknown_lists_allowed():
    msg = _err(parse_dtypes, "x:f8")
    assert "'f8'" in msg
    for name in ("float32", "bfloat16", "uint64", "bool"):
        assert name in msg


@pytest.mark.parametrize(
    "text, token",
    [("x:", "'x:'"), ("x:int32,x:int8", "'x'"), ("x:int32,", "trailing"), ("x:complex64", "'complex64'")],
)
def test_dtypes_errors(text, token):
    msg = _err(parse_dtypes, text)
    assert msg.startswith("--dtypes:")
    assert token in msg


# --------------------------------------------------------------------------
# parse_compare


def test_compare_good():
    got = parse_compare(
        "logits:tolerance,ids:exact,idx:mismatch_fraction=0.01,emb:cosine=0.999,aux:skip"
    )
    assert got == {
        "logits": ("tolerance", None),
        "ids": ("exact", None),
        "idx": ("mismatch_fraction", 0.01),
        "emb": ("cosine", 0.999),
        "aux": ("skip", None),
    }
    assert parse_compare("*:exact") == {"*": ("exact", None)}
    assert parse_compare("'out:0':cosine=-1,x:mismatch_fraction=1") == {
        "out:0": ("cosine", -1.0),
        "x": ("mismatch_fraction", 1.0),
    }
    assert parse_compare("x:mismatch_fraction=0") == {"x": ("mismatch_fraction", 0.0)}


@pytest.mark.parametrize(
    "text, token",
    [
        ("x:fuzzy", "'fuzzy'"),
        ("x:skip=1", "'skip=1'"),
        ("x:exact=0", "'exact=0'"),
        ("x:tolerance=1e-3", "'tolerance=1e-3'"),
        ("x:cosine", "'cosine'"),
        ("x:mismatch_fraction", "'mismatch_fraction'"),
        ("x:cosine=", "''"),
        ("x:cosine=1.5", "'1.5'"),
        ("x:cosine=-2", "'-2'"),
        ("x:mismatch_fraction=-0.1", "'-0.1'"),
        ("x:mismatch_fraction=2", "'2'"),
        ("x:cosine=nan", "'nan'"),
        ("x:cosine=abc", "'abc'"),
        ("x:exact,x:skip", "'x'"),
        ("*:exact,*:skip", "'*'"),
    ],
)
def test_compare_errors(text, token):
    msg = _err(parse_compare, text)
    assert msg.startswith("--compare:")
    assert token in msg


def test_compare_unknown_mode_lists_modes():
    msg = _err(parse_compare, "x:fuzzy")
    for mode in ("tolerance", "exact", "skip", "mismatch_fraction", "cosine"):
        assert mode in msg


# --------------------------------------------------------------------------
# parse_tolerance


def test_tolerance_good():
    assert parse_tolerance("1e-3") == {"": 1e-3}
    assert parse_tolerance("logits:1e-3,other:1e-4") == {"logits": 1e-3, "other": 1e-4}
    assert parse_tolerance("1e-4,logits:1e-3") == {"": 1e-4, "logits": 1e-3}
    assert parse_tolerance("logits:1e-3, 0") == {"logits": 1e-3, "": 0.0}
    assert parse_tolerance("'a:b':0.5", "--rtol") == {"a:b": 0.5}
    assert parse_tolerance("0:1") == {"0": 1.0}  # a name that looks like a number


@pytest.mark.parametrize(
    "text, token",
    [
        ("-1e-3", "'-1e-3'"),
        ("x:-1", "'-1'"),
        ("nan", "'nan'"),
        ("x:inf", "'inf'"),
        ("1e400", "'1e400'"),
        ("abc", "'abc'"),
        ("1,2", "'2'"),
        ("x:1,x:2", "'x'"),
        ("x:", "'x:'"),
        ("x:1,", "trailing"),
        ("'x'", "'x'"),
        ("1 2", "'2'"),
    ],
)
def test_tolerance_errors(text, token):
    msg = _err(parse_tolerance, text)
    assert msg.startswith("--atol:")
    assert token in msg


def test_tolerance_option_name():
    assert _err(parse_tolerance, "-1", "--rtol").startswith("--rtol:")


# --------------------------------------------------------------------------
# parse_batch_sizes


def test_batch_sizes_good():
    assert parse_batch_sizes("1,2,4") == (1, 2, 4)
    assert parse_batch_sizes("8, 1 ,4,1") == (1, 4, 8)
    assert parse_batch_sizes("16") == (16,)


@pytest.mark.parametrize(
    "text, token",
    [
        ("0", "'0'"),
        ("1,0", "'0'"),
        ("-1", "'-1'"),
        ("a", "'a'"),
        ("1.0", "'1.0'"),
        ("1,,2", "'1,,2'"),
        ("1,", "trailing"),
        ("1 2", "'2'"),
        ("'1'", "'1'"),
        (str(MAX_DIM + 1), str(MAX_DIM + 1)),
        ("1:2", "':'"),
    ],
)
def test_batch_sizes_errors(text, token):
    msg = _err(parse_batch_sizes, text)
    assert msg.startswith("--batch-sizes:")
    assert token in msg


def test_batch_sizes_zero_message():
    assert "zero-size" in _err(parse_batch_sizes, "0")


# --------------------------------------------------------------------------
# every parser: empty input, non-str input


@pytest.mark.parametrize("fn", PARSERS)
@pytest.mark.parametrize("text", ["", " ", ","])
def test_all_parsers_reject_empty(fn, text):
    _err(fn, text)


@pytest.mark.parametrize("fn", PARSERS)
def test_all_parsers_reject_non_str(fn):
    _err(fn, None)


@pytest.mark.parametrize("fn", PARSERS)
def test_all_parsers_unterminated_quote(fn):
    msg = _err(fn, "'abc")
    assert "unterminated" in msg


# --------------------------------------------------------------------------
# format_shape / format_name


def test_format_shape():
    assert format_shape((1, 3, 224, 224)) == "1x3x224x224"
    assert format_shape((5,)) == "5"
    assert format_shape(()) == "[]"


def test_format_name():
    assert format_name("input") == "input"
    assert format_name("x:0") == "'x:0'"
    assert format_name("a,b") == "'a,b'"
    assert format_name("it's") == '"it\'s"'
    assert format_name('say "hi"') == "'say \"hi\"'"
    assert format_name("a b") == "'a b'"
    with pytest.raises(UserInputError):
        format_name("it's \"x\"")
    with pytest.raises(UserInputError):
        format_name("")


_names = st.text(min_size=1, max_size=20).filter(lambda s: not ("'" in s and '"' in s))
_shapes = st.lists(st.integers(min_value=1, max_value=MAX_DIM), max_size=5).map(tuple)


@FUZZ
@given(st.dictionaries(_names, _shapes, min_size=1, max_size=5))
def test_format_round_trip(spec):
    text = ",".join(f"{format_name(n)}:{format_shape(s)}" for n, s in spec.items())
    assert parse_shapes(text) == spec


@FUZZ
@given(
    st.dictionaries(
        _names,
        st.tuples(
            st.floats(allow_nan=False, allow_infinity=False, width=64),
            st.floats(allow_nan=False, allow_infinity=False, width=64),
        ).filter(lambda t: t[0] < t[1]),
        min_size=1,
        max_size=4,
    )
)
def test_value_ranges_round_trip(spec):
    text = ",".join(f"{format_name(n)}:{lo!r},{hi!r}" for n, (lo, hi) in spec.items())
    assert parse_value_ranges(text) == spec


@FUZZ
@given(st.text(), st.text(), st.text())
def test_format_name_both_quotes_rejected(a, b, c):
    name = a + "'" + b + '"' + c
    with pytest.raises(UserInputError):
        format_name(name)


# --------------------------------------------------------------------------
# merge_profile


def test_merge_profile_good():
    got = merge_profile({"ids": (1, 16)}, {"ids": (4, 64)}, {"ids": (8, 128)})
    assert got == {"ids": {"min": (1, 16), "opt": (4, 64), "max": (8, 128)}}
    same = {"a": (1, 3), "s": ()}
    assert merge_profile(same, same, same) == {
        "a": {"min": (1, 3), "opt": (1, 3), "max": (1, 3)},
        "s": {"min": (), "opt": (), "max": ()},
    }
    assert merge_profile({}, {}, {}) == {}


def test_merge_profile_min_gt_max():
    with pytest.raises(UserInputError) as info:
        merge_profile({"ids": (1, 64)}, {"ids": (1, 48)}, {"ids": (1, 32)})
    assert str(info.value) == "shape profile for 'ids': min 1x64 > max 1x32 at dim 1"


def test_merge_profile_opt_out_of_range():
    with pytest.raises(UserInputError) as info:
        merge_profile({"ids": (1, 16)}, {"ids": (1, 64)}, {"ids": (1, 32)})
    assert "opt 1x64 > max 1x32 at dim 1" in str(info.value)
    with pytest.raises(UserInputError) as info:
        merge_profile({"ids": (2, 16)}, {"ids": (1, 16)}, {"ids": (4, 32)})
    assert "min 2x16 > opt 1x16 at dim 0" in str(info.value)


def test_merge_profile_rank_mismatch():
    with pytest.raises(UserInputError) as info:
        merge_profile({"ids": (1,)}, {"ids": (1, 2)}, {"ids": (1, 2)})
    assert "'ids'" in str(info.value) and "rank" in str(info.value)


@pytest.mark.parametrize(
    "args, missing",
    [
        (({"ids": (1,)}, {}, {"ids": (2,)}), "--opt-shapes"),
        (({}, {"ids": (1,)}, {"ids": (2,)}), "--min-shapes"),
        (({"ids": (1,)}, {"ids": (1,)}, {}), "--max-shapes"),
        (({"ids": (1,), "m": (1,)}, {"ids": (1,)}, {"ids": (1,), "m": (1,)}), "--opt-shapes"),
    ],
)
def test_merge_profile_missing(args, missing):
    with pytest.raises(UserInputError) as info:
        merge_profile(*args)
    msg = str(info.value)
    assert msg.startswith(f"{missing} is missing for ")


def test_merge_profile_missing_message_exact():
    with pytest.raises(UserInputError) as info:
        merge_profile({"ids": (1,)}, {}, {"ids": (2,)})
    assert str(info.value) == "--opt-shapes is missing for 'ids'"


# --------------------------------------------------------------------------
# fuzzing: only UserInputError may ever escape

_ALPHABET = "ab:x,01'\"=-.e "


def _only_user_errors(fn, text):
    try:
        result = fn(text)
    except UserInputError as exc:
        assert "\n" not in str(exc)
        return None
    return result


@pytest.mark.parametrize("fn", PARSERS)
@FUZZ
@given(text=st.text())
def test_fuzz_arbitrary_text(fn, text):
    _only_user_errors(fn, text)


@pytest.mark.parametrize("fn", PARSERS)
@FUZZ
@given(text=st.text(alphabet=_ALPHABET, max_size=40))
def test_fuzz_grammar_alphabet(fn, text):
    _only_user_errors(fn, text)


@FUZZ
@given(text=st.text(alphabet="ab:x,0123'\"[] ", max_size=40))
def test_fuzz_shapes_results_are_valid(text):
    got = _only_user_errors(parse_shapes, text)
    if got is not None:
        assert got
        for name, shape in got.items():
            assert name
            assert all(isinstance(d, int) and 1 <= d <= MAX_DIM for d in shape)


@FUZZ
@given(text=st.text(alphabet="ab:,01.e-+ ", max_size=40))
def test_fuzz_tolerance_results_are_valid(text):
    got = _only_user_errors(parse_tolerance, text)
    if got is not None:
        assert all(math.isfinite(v) and v >= 0 for v in got.values())


@FUZZ
@given(
    text=st.text(alphabet="ab:,=01.-* ", max_size=30).map(
        lambda s: s.replace("a", "cosine=").replace("b", "mismatch_fraction=")
    )
)
def test_fuzz_compare_modes(text):
    got = _only_user_errors(parse_compare, text)
    if got is not None:
        for mode, value in got.values():
            if mode == "cosine":
                assert value is not None and -1 <= value <= 1
            elif mode == "mismatch_fraction":
                assert value is not None and 0 <= value <= 1
            else:
                assert value is None


@FUZZ
@given(
    st.dictionaries(_names, _shapes, max_size=3),
    st.dictionaries(_names, _shapes, max_size=3),
    st.dictionaries(_names, _shapes, max_size=3),
)
def test_fuzz_merge_profile(a, b, c):
    try:
        got = merge_profile(a, b, c)
    except UserInputError:
        return
    for prof in got.values():
        for lo, mid, hi in zip(prof["min"], prof["opt"], prof["max"]):
            assert lo <= mid <= hi
