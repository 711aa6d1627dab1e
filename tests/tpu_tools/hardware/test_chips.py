"""The chip table stays equal to what jax's Pallas TPU backend knows; targets parse."""

import dataclasses

import pytest
from jax.experimental.pallas import tpu as pltpu

from maxkernel.tpu_tools.hardware.chips import CHIPS, UnknownChipError, chip_for_device_kind, get_chip
from maxkernel.tpu_tools.hardware.targets import UnknownTargetError, parse_target


@pytest.mark.parametrize("name", list(CHIPS))
def test_chip_table_matches_pltpu(name):
    chip = CHIPS[name]
    info = dataclasses.asdict(pltpu.get_tpu_info_for_chip(pltpu.ChipVersion(chip.chip_version), 1))
    assert chip.vmem_bytes == info["vmem_capacity_bytes"]
    assert chip.smem_bytes == info["smem_capacity_bytes"]
    assert chip.hbm_bytes == info["hbm_capacity_bytes"]
    assert chip.hbm_bytes_per_s == pytest.approx(info["mem_bw_bytes_per_second"])
    assert chip.peak_bf16_flops_per_s == pytest.approx(info["bf16_ops_per_second"])
    assert chip.peak_int8_tops * 1e12 == pytest.approx(info["int8_ops_per_second"])
    assert chip.mxu_shape == (info["mxu_column_size"],) * 2
    assert chip.num_mxus == info["num_mxus"]


def test_lookup_and_errors():
    assert get_chip("v6e").name == "tpu-v6e" and get_chip("TPU-V5E").device_kind == "TPU v5 lite"
    assert chip_for_device_kind("TPU v6 lite").name == "tpu-v6e" and chip_for_device_kind("cpu") is None
    with pytest.raises(UnknownChipError, match="known: tpu-v4"):
        get_chip("tpu-v9")
    assert parse_target("cpu").kind == "cpu" and parse_target("tpu-7x").chip.topology == "tpu7x:2x2x1"
    with pytest.raises(UnknownTargetError, match="choose one of"):
        parse_target("gpu")
