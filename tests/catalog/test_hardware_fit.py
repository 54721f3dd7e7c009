"""A hardware profile's fitted parameters as nested groups (``fit.gemm``, ``fit.comm``, ...): a partial group merges
over the generation's field by field, the flat names of before the groups still read (with a warning) into the very
same profile, and a misspelt name is a one-line error naming it."""

from __future__ import annotations

import shutil

import pytest
import yaml

from simulator.catalog import generations, load_hardware
from simulator.catalog.generations import generation_fit
from simulator.catalog.hardware import HardwareSpec, fit_value, with_fit
from simulator.catalog.hardware_fit import FLAT_NAMES, HardwareFit
from simulator.errors import LLMSimError
from tests.helpers import REPO

SHEET = {"name": "mine", "generation": "hopper", "memory_gib": 80, "memory_bandwidth_gb_per_s": 3350,
         "peak_tflops": {"bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, "sm_count": 132, "sfu_exp_tera_per_s": 3.9}


def load(tmp_path, document: dict) -> HardwareSpec:
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(document))
    return load_hardware(str(path))


def test_a_partial_group_merges_over_the_generations_fit_field_by_field(tmp_path):
    """``fit: {gemm: {tile_m: 64}}`` replaces that one field: the GEMMs' other fields, the other groups and the
    shared ones stay Hopper's; a table (the GEMM fractions per format, the collectives) takes the entries given over
    the generation's, a sub-model (the all-reduce's low-latency protocol) is replaced whole or set to null."""
    hopper = generation_fit("hopper")
    mine = load(tmp_path, {**SHEET, "fit": {
        "gemm": {"tile_m": 64, "flops_efficiency_by_dtype": {"fp8": 0.6}},
        "comm": {"all_reduce_low_latency": None,
                 "collectives": {"all_gather": {"latency_us": 1.0, "step_latency_us": 0.0, "efficiency": 0.5}}},
        "kernel_overhead_us": 9.0}})
    assert mine.fit.gemm.tile_m == 64 and hopper.gemm.tile_m == 32
    assert mine.fit.gemm.flops_efficiency_by_dtype == {"fp8": 0.6, "fp8_block": 0.58}  # fp8_block: Hopper's
    assert mine.fit.gemm.model_dump(exclude={"tile_m", "flops_efficiency_by_dtype"}) == hopper.gemm.model_dump(
        exclude={"tile_m", "flops_efficiency_by_dtype"})
    assert mine.fit.comm.all_reduce_low_latency is None and mine.fit.comm.all_reduce_nvls == hopper.comm.all_reduce_nvls
    assert mine.fit.comm.collectives["all_gather"].low_latency is None  # the entry given, whole
    assert mine.fit.comm.collectives["all_to_all"] == hopper.comm.collectives["all_to_all"]
    assert (mine.fit.kernel_overhead_us, mine.fit.bandwidth_efficiency) == (9.0, hopper.bandwidth_efficiency)
    assert (mine.fit.prefill_attention, mine.fit.decode_attention, mine.fit.moe) == (
        hopper.prefill_attention, hopper.decode_attention, hopper.moe)


def test_the_flat_names_of_before_the_groups_read_into_the_same_profile(tmp_path):
    """Every flat name of a fitted parameter (``gemm_tile_m``, ``attention_efficiency``, ``collective_latency_us``,
    ``fitted_sm_count``, ...) at a profile's top level reads as its place in ``fit`` — the profile equal to the one
    spelled in groups — with one FutureWarning naming the old spelling; the shipped A100 PCIe profile as it was
    written before (its network fit flat) loads as today's."""
    values = {"fitted_sm_count": 100, "gemm_tile_m": 16, "flops_efficiency": 0.5, "bandwidth_efficiency": 0.8,
              "attention_overhead_us": 7.0, "decode_attention_overhead_us": 6.0, "moe_kernels": 4,
              "collective_latency_us": 11.0, "p2p_latency_us": 3.0, "host_speedup": 1.5,
              "flops_efficiency_by_dtype": {"fp8": 0.5}}
    nested = {"sm_count": 100, "bandwidth_efficiency": 0.8, "host_speedup": 1.5,
              "gemm": {"tile_m": 16, "flops_efficiency": 0.5, "flops_efficiency_by_dtype": {"fp8": 0.5}},
              "prefill_attention": {"overhead_us": 7.0}, "decode_attention": {"overhead_us": 6.0},
              "moe": {"kernels": 4}, "comm": {"latency_us": 11.0, "p2p_latency_us": 3.0}}
    with pytest.warns(FutureWarning, match=r"hardware: the fitted parameters are grouped \(attention_overhead_us -> "
                      r"fit\.prefill_attention\.overhead_us, .* and 8 more\); the old flat spelling goes"):
        flat = load(tmp_path, {**SHEET, **values})
    assert flat == load(tmp_path, {**SHEET, "fit": nested})
    assert flat.fit.gemm.flops_efficiency_by_dtype == {"fp8": 0.5, "fp8_block": 0.58}  # merged as before
    assert all(fit_value(flat, name) == value for name, value in values.items() if name != "flops_efficiency_by_dtype")
    old = yaml.safe_load(_old_a100_pcie())
    assert "link_efficiency" in old and "fit" not in old
    with pytest.warns(FutureWarning):
        # (with the board power the profile has stated since; it is no fitted parameter)
        assert load(tmp_path, {**old, "board_power_w": 300}) == load_hardware("a100-80gb-pcie")


def _old_a100_pcie() -> str:
    """hardware_profiles/a100-80gb-pcie.yaml with its network fit in the flat names it had before the groups."""
    text = (REPO / "hardware_profiles" / "a100-80gb-pcie.yaml").read_text()
    start = text.index("fit:\n")
    end = text.index("sources:")
    flat = ("link_efficiency: 0.7\ncollective_latency_us: 30\nall_reduce_low_latency: null\n"
            "collective_step_latency_us: 4\np2p_efficiency: 0.95\np2p_latency_us: 6\n")
    return text[:start] + flat + text[end:]


def test_every_flat_name_has_a_place_in_the_fit():
    """:data:`FLAT_NAMES` covers the groups: every field of every group (and of the fit itself) is some flat name's
    place, and each place is a field."""
    places = set(FLAT_NAMES.values())
    fields = {name for name in HardwareFit.model_fields if name not in ("gemm", "prefill_attention",
                                                                      "decode_attention", "moe", "comm")}
    for group in ("gemm", "prefill_attention", "decode_attention", "moe", "comm"):
        fields |= {f"{group}.{name}" for name in HardwareFit.model_fields[group].annotation.model_fields}
    assert places == fields


@pytest.mark.parametrize(("document", "expected"), [
    ({"gemm_tile": 64}, r"mine\.yaml: gemm_tile: unknown key"),
    ({"fit": {"gemm": {"tile": 64}}}, r"mine\.yaml: fit\.gemm\.tile: unknown key \(did you mean 'tile_m'\?"),
    ({"fit": {"gemm_tile_m": 64}}, r"mine\.yaml: fit\.gemm_tile_m: unknown key"),
    ({"fit": {"attention": {"efficiency": 0.5}}}, r"mine\.yaml: fit\.attention: unknown key"),
    ({"fit": {"gemm": {"tile_m": 0}}}, r"mine\.yaml: fit\.gemm\.tile_m: must be >= 1, got 0"),
    ({"gemm_tile_m": 64, "fit": {"gemm": {"tile_m": 32}}},
     r"mine\.yaml: .*give fit\.gemm\.tile_m only \(gemm_tile_m is its old spelling\)"),
])
def test_a_misspelt_fitted_parameter_is_one_line_naming_it(tmp_path, document, expected):
    with pytest.raises(LLMSimError, match=expected) as caught:
        load(tmp_path, {**SHEET, **document})
    assert "\n" not in str(caught.value)


def test_with_fit_replaces_parameters_by_place_or_flat_name_and_refuses_an_unknown_one():
    h100 = load_hardware("h100-sxm")
    by_place = with_fit(h100, {"gemm.tile_m": 64, "comm.collectives.all_gather.latency_us": 1.0})
    by_name = with_fit(h100, {"gemm_tile_m": 64, "collectives.all_gather.latency_us": 1.0})
    assert by_place == by_name and by_place.fit.gemm.tile_m == 64 and h100.fit.gemm.tile_m == 32
    assert by_place.fit.comm.collectives["all_gather"].latency_us == 1.0
    assert by_place.fit.comm.collectives["reduce_scatter"] == h100.fit.comm.collectives["reduce_scatter"]
    for name in ("gemm.tile", "gemm_tile", "attention.efficiency"):
        with pytest.raises(ValueError, match="has no field"):
            with_fit(h100, {name: 1})
    with pytest.raises(ValueError, match="HardwareSpec has no field 'gemm_tile_m'"):
        h100.model_copy(update={"gemm_tile_m": 64})  # a flat name never lands unseen


def test_a_generation_file_in_the_flat_names_loads_as_the_grouped_one(tmp_path, monkeypatch):
    """hopper.yaml as it was written before the groups (its fit flat, the exponential balance inside it) gives the
    fit and balance of today's, with a FutureWarning."""
    generations._generations.cache_clear()
    before = generations.generation_fit("hopper"), generations.generation_exp_balance("hopper")
    folder = tmp_path / "generations"
    shutil.copytree(REPO / "hardware_profiles" / "generations", folder)
    grouped = yaml.safe_load((folder / "hopper.yaml").read_text())
    flat = {"sfu_exp_per_bf16_flop": grouped["sfu_exp_per_bf16_flop"]}
    for name, place in FLAT_NAMES.items():
        group, _, field = place.rpartition(".")
        holder = grouped["fit"].get(group, {}) if group else grouped["fit"]
        if field in holder:
            flat[name] = holder[field]
    (folder / "hopper.yaml").write_text(yaml.safe_dump({"name": "hopper", "fit": flat}))
    monkeypatch.setattr(generations, "GENERATIONS_DIR", folder)
    generations._generations.cache_clear()
    try:
        with pytest.warns(FutureWarning, match="generation hopper: fit: the fitted parameters are grouped"):
            after = generations.generation_fit("hopper"), generations.generation_exp_balance("hopper")
    finally:
        generations._generations.cache_clear()
    assert after == before
