"""The CPU's instruction sets as the precisions see them, judged from the flag lines of known CPUs."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

from lnserve.app.runtime.cpu_features import bf16_unsupported, cpu_flags, isa_summary, parse_flags

# The ``flags`` lines of /proc/cpuinfo (abridged to the x86 feature flags; the order is the kernel's).
EPYC_ZEN2 = frozenset(  # AMD EPYC 7502: AVX2 only
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
    "syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl pni pclmulqdq ssse3 fma cx16 "
    "sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy abm sse4a misalignsse "
    "3dnowprefetch osvw topoext fsgsbase bmi1 avx2 smep bmi2 rdseed adx smap clflushopt clwb sha_ni "
    "xsaveopt xsavec xgetbv1 xsaves clzero arat umip rdpid".split()
)
EPYC_ZEN4 = frozenset(  # AMD EPYC Genoa: AVX-512 with VNNI and BF16, no AMX
    "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2 avx512f avx512dq avx512ifma avx512cd "
    "sha_ni avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni "
    "avx512_bitalg avx512_vpopcntdq".split()
)
SAPPHIRE_RAPIDS = frozenset(  # Intel Xeon 4th gen: AVX-512 BF16 and AMX
    "fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c bmi1 avx2 bmi2 avx512f avx512dq avx512ifma avx512cd "
    "avx512bw avx512vl avx_vnni avx512_bf16 avx512vbmi avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni "
    "avx512_bitalg avx512_vpopcntdq avx512_fp16 amx_bf16 amx_tile amx_int8".split()
)
CASCADE_LAKE = frozenset(
    "fpu sse sse2 fma avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni".split()
)
ALDER_LAKE = frozenset("fpu sse sse2 fma avx avx2 avx_vnni".split())
AMX_ONLY = frozenset({"avx2", "fma", "amx_bf16", "amx_tile"})  # a hypervisor passing AMX but not AVX-512 BF16
GRAVITON = frozenset()  # aarch64 has no ``flags`` line: nothing read


@pytest.mark.parametrize(
    ("flags", "supported"),
    [
        (EPYC_ZEN2, False),
        (CASCADE_LAKE, False),
        (ALDER_LAKE, False),
        (GRAVITON, False),
        (EPYC_ZEN4, True),
        (SAPPHIRE_RAPIDS, True),
        (AMX_ONLY, True),
    ],
)
def test_bf16_needs_avx512_bf16_or_amx(flags: frozenset[str], supported: bool) -> None:
    reason = bf16_unsupported(flags)
    if supported:
        assert reason is None
    else:
        assert reason is not None and "\n" not in reason
        assert reason.startswith("bf16 needs a CPU with AVX-512 BF16 or AMX")
        assert "use --precision fp32 or int8" in reason


def test_unreadable_flags_say_so() -> None:
    assert bf16_unsupported(EPYC_ZEN2) == (
        "bf16 needs a CPU with AVX-512 BF16 or AMX (this one has neither); use --precision fp32 or int8"
    )
    assert "could not be read" in str(bf16_unsupported(GRAVITON))


@pytest.mark.parametrize(
    ("flags", "summary"),
    [
        (EPYC_ZEN2, "AVX2, FMA"),
        (ALDER_LAKE, "AVX2, FMA, AVX-VNNI"),
        (frozenset({"avx2", "fma", "avx512f", "avx512dq"}), "AVX-512"),
        (CASCADE_LAKE, "AVX-512 VNNI"),
        (EPYC_ZEN4, "AVX-512 VNNI, AVX-512 BF16"),
        (SAPPHIRE_RAPIDS, "AVX-512 VNNI, AVX-512 BF16, AMX BF16, AMX INT8"),
        (frozenset({"fpu", "sse", "sse2", "sse4_2"}), "none of AVX2/AVX-512"),
        (GRAVITON, "unknown"),
    ],
)
def test_isa_summary_names_the_highest_tier(flags: frozenset[str], summary: str) -> None:
    assert isa_summary(flags) == summary


def test_parse_flags_reads_the_first_flags_line() -> None:
    text = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu avx2 avx512_bf16\n"
        "bugs\t\t: sysret_ss_attrs\n"
        "\nprocessor\t: 1\nflags\t\t: fpu avx2 avx512_bf16\n"
    )
    assert parse_flags(text) == {"fpu", "avx2", "avx512_bf16"}
    assert parse_flags("processor\t: 0\nFeatures\t: fp asimd bf16\n") == frozenset()  # aarch64's line
    assert parse_flags("") == frozenset()


def test_cpu_flags_reads_a_file_and_tolerates_none(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n", encoding="utf-8")
    assert cpu_flags(info) == {"fpu", "sse2", "avx2", "fma"}
    assert cpu_flags(tmp_path / "absent") == frozenset()
    assert cpu_flags(tmp_path) == frozenset()  # a directory: unreadable, not an error


@pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not Path("/proc/cpuinfo").is_file(),
    reason="no x86 /proc/cpuinfo on this system",
)
def test_this_machine_has_flags() -> None:
    flags = cpu_flags()
    assert flags, "a Linux /proc/cpuinfo with no flags line"
    assert isa_summary(flags) != "unknown"
