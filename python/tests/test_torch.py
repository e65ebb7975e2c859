"""torch tensors: every float dtype without conversion, zero-copy views, assert_close parity with
torch.testing.assert_close (defaults, dtype rules, messages)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import loupe  # noqa: E402


def test_bfloat16_and_float16_tensors_compare_without_conversion():
    expected = torch.linspace(-2, 2, 64).reshape(8, 8)
    for dtype in (torch.bfloat16, torch.float16):
        a = expected.to(dtype)
        b = a.clone()
        b[5, 6] = b[5, 6] + 1
        result = loupe.diff(b, a, axes="T,D")
        assert result.tensors[0].dtype_a == str(dtype).replace("torch.", "")
        assert result.worst.coords == {"T": 5, "D": 6}
        assert result.worst.abs_error == pytest.approx(1.0, abs=1e-2)


def test_fp8_bits_are_read_when_torch_has_fp8():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("this torch (%s) has no float8 dtypes" % torch.__version__)
    a = torch.tensor([0.5, 1.0, 2.0]).to(torch.float8_e4m3fn)
    assert loupe.diff(a, a.clone()).passed


def test_tensors_requiring_grad_and_non_contiguous_views_are_accepted():
    weight = torch.randn(16, 8, requires_grad=True)
    view = weight.t()  # not contiguous
    result = loupe.diff(view, view.detach().clone())
    assert result.passed
    assert result.tensors[0].shape == (8, 16)


def test_float32_cpu_tensor_is_viewed_not_copied():
    from loupe import _arrays

    tensor = torch.randn(1024)
    operand = _arrays.operand(tensor, "actual")
    assert operand.array.ctypes.data == tensor.data_ptr()


def test_assert_close_passes_where_torch_passes():
    base = torch.randn(100, dtype=torch.float32)
    nudged = base * (1 + 1e-7)
    torch.testing.assert_close(nudged, base)
    loupe.assert_close(nudged, base)
    loupe.assert_close(base.to(torch.bfloat16), (base * (1 + 4e-3)).to(torch.bfloat16))
    loupe.assert_close(torch.arange(5), torch.arange(5))


@pytest.mark.parametrize("dtype,rtol,atol", [
    (torch.float16, 1e-3, 1e-5), (torch.bfloat16, 1.6e-2, 1e-5),
    (torch.float32, 1.3e-6, 1e-5), (torch.float64, 1e-7, 1e-7), (torch.int32, 0, 0)])
def test_default_tolerances_are_torchs(dtype, rtol, atol):
    if dtype.is_floating_point:
        assert loupe.DEFAULT_TOLERANCES[str(dtype).replace("torch.", "")] == (rtol, atol)
    # Just inside and just outside atol + rtol*|expected| for expected = 1.
    expected = torch.ones(4, dtype=torch.float64)
    inside = expected + 0.9 * (atol + rtol)
    outside = expected + 3.0 * (atol + rtol) + (1 if not dtype.is_floating_point else 0)
    e, i, o = expected.to(dtype), inside.to(dtype), outside.to(dtype)
    verdicts = []
    for candidate in (i, o):
        try:
            torch.testing.assert_close(candidate, e)
            torch_ok = True
        except AssertionError:
            torch_ok = False
        try:
            loupe.assert_close(candidate, e)
            loupe_ok = True
        except AssertionError:
            loupe_ok = False
        verdicts.append((torch_ok, loupe_ok))
    for torch_ok, loupe_ok in verdicts:
        assert torch_ok == loupe_ok
    assert verdicts[1] == (False, False)


def test_shape_and_dtype_messages_are_torchs():
    with pytest.raises(AssertionError) as loupe_error:
        loupe.assert_close(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(AssertionError) as torch_error:
        torch.testing.assert_close(torch.zeros(2, 3), torch.zeros(3, 2))
    assert str(loupe_error.value) == str(torch_error.value)
    with pytest.raises(AssertionError) as loupe_error:
        loupe.assert_close(torch.zeros(3), torch.zeros(3, dtype=torch.float64))
    with pytest.raises(AssertionError) as torch_error:
        torch.testing.assert_close(torch.zeros(3), torch.zeros(3, dtype=torch.float64))
    assert str(loupe_error.value) == str(torch_error.value)
    loupe.assert_close(torch.zeros(3), torch.zeros(3, dtype=torch.float64), check_dtype=False)


def test_rtol_without_atol_is_a_value_error_as_in_torch():
    with pytest.raises(ValueError) as caught:
        loupe.assert_close(torch.zeros(3), torch.zeros(3), rtol=1e-3)
    assert "Both 'rtol' and 'atol'" in str(caught.value)
    assert isinstance(caught.value, loupe.UsageError)


def test_nan_fails_unless_equal_nan():
    a = torch.tensor([1.0, float("nan")])
    with pytest.raises(AssertionError) as caught:
        loupe.assert_close(a, a.clone())
    assert "Mismatched elements: 1 / 2 (50.0%)" in str(caught.value)
    loupe.assert_close(a, a.clone(), equal_nan=True)


def test_failure_message_has_torchs_lines_then_where():
    expected = torch.zeros(64, 4, 16)
    actual = expected.clone()
    actual[:, 2, :] += torch.arange(64, dtype=torch.float32)[:, None] * 1e-2
    with pytest.raises(AssertionError) as caught:
        loupe.assert_close(actual, expected, axes="T,H,D", along="T")
    message = str(caught.value)
    lines = message.splitlines()
    assert lines[0] == "Tensor-likes are not close!"
    assert lines[2] == "Mismatched elements: 1008 / 4096 (24.6%)"
    assert lines[3].startswith("Greatest absolute difference: 0.629999995") and \
        "at index (63, 2, 0) (up to 1e-05 allowed)" in lines[3]
    assert "loupe: worst at T=63, H=2, D=0" in message
    assert "growing along T" in message
    assert "H=2 holds 99.99% of squared error (fair share 25%)" in message
    assert len(lines) <= 10


def test_dicts_name_the_first_divergent_entry():
    expected = {"layers": [torch.zeros(4, 4) for _ in range(4)], "logits": torch.zeros(4, 10)}
    actual = {"layers": [t.clone() for t in expected["layers"]], "logits": torch.ones(4, 10)}
    actual["layers"][2][1, 1] = 1.0
    with pytest.raises(AssertionError) as caught:
        loupe.assert_close(actual, expected)
    message = str(caught.value)
    assert message.startswith("The failure occurred for item ['layers', 2]")
    assert "first divergent entry: layers.2 (2 of 5 entries past tolerance); then logits" \
        in message


def test_numpy_and_torch_mix():
    loupe.assert_close(torch.ones(3, dtype=torch.float64), np.ones(3))


@pytest.mark.parametrize("actual,expected", [(1.0, 1.1), (1, 2), (0.0, 1e-9)])
def test_python_scalars_as_torch_says_them(actual, expected):
    outcomes = []
    for function in (loupe.assert_close, torch.testing.assert_close):
        try:
            function(actual, expected)
            outcomes.append(None)
        except AssertionError as error:
            outcomes.append(str(error))
    assert outcomes[0] == outcomes[1]


def test_meta_tensors_and_bare_number_tol_are_loupe_errors():
    meta = torch.ones(3, device="meta")
    with pytest.raises(loupe.InputError):
        loupe.diff(meta, meta)
    with pytest.raises(loupe.UsageError):
        loupe.diff(torch.ones(3), torch.ones(3), tol=1e-3)


def test_torch_save_files_compare_as_the_dicts_they_hold(tmp_path):
    state = {"layers": {"0": torch.ones(4), "1": torch.arange(6.0).reshape(2, 3)},
             "logits": torch.zeros(3, dtype=torch.bfloat16)}
    changed = {"layers": {"0": torch.ones(4), "1": torch.arange(6.0).reshape(2, 3) + 0.5},
               "logits": torch.zeros(3, dtype=torch.bfloat16)}
    torch.save(state, tmp_path / "a.pt")
    torch.save(changed, tmp_path / "b.pt")
    torch.save(state, tmp_path / "c.pt")
    result = loupe.diff(str(tmp_path / "a.pt"), str(tmp_path / "b.pt"))
    assert [t.name for t in result.tensors] == ["layers.0", "layers.1", "logits"]
    assert result.first_divergence == "layers.1"
    assert loupe.diff(tmp_path / "a.pt", tmp_path / "c.pt").passed
    with pytest.raises(loupe.UsageError, match="a torch.save file is compared with another"):
        loupe.diff(str(tmp_path / "a.pt"), str(tmp_path))


def test_directories_of_torch_save_files_compare_file_by_file(tmp_path):
    # SGLang's dumper layout: one directory per rank, a file per dumped tensor named by its keys.
    for side, fault in (("a", 0.0), ("b", 0.25)):
        directory = tmp_path / side
        directory.mkdir()
        for layer in (0, 1, 10):
            value = torch.full((2, 4), float(layer)) + (fault if layer == 1 else 0.0)
            torch.save(value, directory / ("forward_pass_id=2___name=hidden___layer_id=%d.pt"
                                           % layer))
    result = loupe.diff(str(tmp_path / "a"), str(tmp_path / "b"))
    assert [t.name for t in result.tensors] == [
        "forward_pass_id=2___name=hidden___layer_id=0",
        "forward_pass_id=2___name=hidden___layer_id=1",
        "forward_pass_id=2___name=hidden___layer_id=10"]
    assert result.first_divergence == "forward_pass_id=2___name=hidden___layer_id=1"
