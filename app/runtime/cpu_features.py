"""What the CPU offers the reduced precisions: its instruction-set flags, whether bf16 can run, and a short
summary for ``/info`` and the benchmarks. Reading the flags is the only impure part; the rest are pure
functions of a flag set, so they are tested with the flags of known CPUs."""

from __future__ import annotations

from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")

# Flags that give the CPU bf16 GEMM kernels (oneDNN picks them for PyTorch's bf16 matmuls).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")

# (flag, label, flags it makes redundant in the summary), most basic first: the summary names the
# highest tier only, so an AVX-512 VNNI machine does not also list AVX-512, AVX2 and FMA.
_ISA: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("avx2", "AVX2", ()),
    ("fma", "FMA", ()),
    ("avx_vnni", "AVX-VNNI", ()),
    ("avx512f", "AVX-512", ("avx2", "fma")),
    ("avx512_vnni", "AVX-512 VNNI", ("avx512f", "avx2", "fma", "avx_vnni")),
    ("avx512_bf16", "AVX-512 BF16", ("avx512f", "avx2", "fma")),
    ("amx_bf16", "AMX BF16", ()),
    ("amx_int8", "AMX INT8", ()),
)


def parse_flags(cpuinfo: str) -> frozenset[str]:
    """The first ``flags`` line of a ``/proc/cpuinfo`` text as a set (every core lists the same ones)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """This machine's x86 flags from ``/proc/cpuinfo``; an empty set where there is none to read (not
    Linux, no procfs, another architecture)."""
    try:
        return parse_flags(cpuinfo.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return frozenset()


def bf16_unsupported(flags: set[str] | frozenset[str]) -> str | None:
    """Why bf16 cannot run on a CPU with these flags (one line), or None when it has AVX-512 BF16 or AMX."""
    if any(f in flags for f in BF16_FLAGS):
        return None
    which = "its flags could not be read" if not flags else "this one has neither"
    return f"bf16 needs a CPU with AVX-512 BF16 or AMX ({which}); use --precision fp32 or int8"


def isa_summary(flags: set[str] | frozenset[str]) -> str:
    """The vector instruction sets that matter to the precisions, e.g. ``AVX-512 VNNI, AVX-512 BF16`` or
    ``AVX2, FMA``; ``none of AVX2/AVX-512`` or ``unknown`` (no flags read)."""
    if not flags:
        return "unknown"
    present = [(flag, label, implied) for flag, label, implied in _ISA if flag in flags]
    redundant = {f for _, _, implied in present for f in implied}
    labels = [label for flag, label, _ in present if flag not in redundant]
    return ", ".join(labels) if labels else "none of AVX2/AVX-512"


# Flags whose u8 x s8 kernels accumulate in 32 bits (onnxruntime's MLAS: vpdpbusd, AMX tiles).
INT8_DOT_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


def int8_scheme_for(flags: set[str] | frozenset[str]) -> str:
    """The int8 activation scheme (``onnx_graph.gemms.SCHEMES``) for a CPU: ``full`` where products
    accumulate in 32 bits, ``pair-safe`` where AVX2's ``vpmaddubsw`` sums pairs into a saturating int16."""
    return "full" if any(f in flags for f in INT8_DOT_FLAGS) else "pair-safe"
