"""The torch backend's precisions: fp32 as before, bf16 with only the GEMM weights in bfloat16, every other
precision and a CPU without bf16 instructions refused with a one-line error (these run on any machine)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lnserve.app.runtime.errors import EncodeInputError, ProviderUnavailableError
from lnserve.app.runtime.torch_backend import TorchBackend
from lnserve.converters.artifact import read_artifact
from tests.conftest import OE_MODELS, ST_VARIANTS
from tests.unit.app.runtime.test_cpu_features import EPYC_ZEN2, EPYC_ZEN4, GRAVITON, SAPPHIRE_RAPIDS

MODELS = (*OE_MODELS, *ST_VARIANTS)
GEMM_WEIGHTS = (".cell.weight_ih", ".cell.weight_hh")


@pytest.mark.parametrize("precision", ["fp16", "int8", "BF16", "bfloat16", ""])
def test_other_precisions_are_refused(precision: str, artifacts: dict[str, Path]) -> None:
    with pytest.raises(EncodeInputError) as info:
        TorchBackend(read_artifact(artifacts["oe_order_lngru"]), precision=precision)
    message = str(info.value)
    assert "\n" not in message and repr(precision) in message and "fp32, bf16" in message


@pytest.mark.parametrize("flags", [EPYC_ZEN2, GRAVITON], ids=["avx2-epyc", "no-flags"])
def test_bf16_without_the_instructions_is_refused(flags: frozenset[str], artifacts: dict[str, Path]) -> None:
    with pytest.raises(ProviderUnavailableError) as info:
        TorchBackend(read_artifact(artifacts["oe_order_lngru"]), precision="bf16", flags=flags)
    message = str(info.value)
    assert "\n" not in message and "bf16 needs a CPU with AVX-512 BF16 or AMX" in message
    assert info.value.code == "provider_unavailable" and info.value.exit_code == 2


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("flags", [EPYC_ZEN4, SAPPHIRE_RAPIDS], ids=["avx512-bf16", "amx"])
def test_bf16_holds_only_the_gemm_weights_in_bfloat16(
    name: str, flags: frozenset[str], artifacts: dict[str, Path]
) -> None:
    """The flags are given, so this checks the module on any machine (bf16 emulated where it must be)."""
    backend = TorchBackend(read_artifact(artifacts[name]), precision="bf16", flags=flags)
    assert backend.precision == "bf16"
    dtypes = {k: v.dtype for k, v in backend.module.state_dict().items()}
    gemms = {k for k in dtypes if k.endswith(GEMM_WEIGHTS)}
    assert gemms and all(dtypes[k] == torch.bfloat16 for k in gemms)
    assert all(dt == torch.float32 for k, dt in dtypes.items() if k not in gemms), dtypes


@pytest.mark.parametrize("name", MODELS)
def test_fp32_is_the_default_and_all_float32(name: str, artifacts: dict[str, Path]) -> None:
    backend = TorchBackend(read_artifact(artifacts[name]))
    assert backend.precision == "fp32"
    assert all(v.dtype == torch.float32 for v in backend.module.state_dict().values())


def test_bf16_without_onednn_is_refused(artifacts: dict[str, Path]) -> None:
    """torch's own switch: with oneDNN off, bf16 matmuls take a reference kernel slower than fp32."""
    with torch.backends.mkldnn.flags(enabled=False), pytest.raises(ProviderUnavailableError) as info:
        TorchBackend(read_artifact(artifacts["oe_order_lngru"]), precision="bf16", flags=EPYC_ZEN4)
    assert "oneDNN" in str(info.value) and "\n" not in str(info.value)
