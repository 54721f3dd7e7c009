"""GPU generations as data files (hardware_profiles/generations/*.yaml): a new generation is one file, and a bad
one is a one-line error naming it."""

from __future__ import annotations

import shutil

import pytest
import yaml

from simulator.catalog import generations, load_hardware
from simulator.catalog.hardware_fit import HardwareFit
from simulator.errors import LLMSimError
from tests.helpers import REPO


@pytest.fixture
def generations_dir(tmp_path, monkeypatch):
    """A copy of the shipped generation files that a test may add to; the cache is cleared around it."""
    folder = tmp_path / "generations"
    shutil.copytree(REPO / "hardware_profiles" / "generations", folder)
    monkeypatch.setattr(generations, "GENERATIONS_DIR", folder)
    generations._generations.cache_clear()
    yield folder
    generations._generations.cache_clear()


def test_every_shipped_generation_has_a_fit_or_borrows_a_measured_one():
    for name in generations.generation_names():
        entry = yaml.safe_load((REPO / "hardware_profiles" / "generations" / f"{name}.yaml").read_text())
        lender = entry.get("borrows_from")
        fit = generations.generation_fit(name)
        assert fit == (HardwareFit.model_validate(entry["fit"]) if lender is None else generations.generation_fit(
            lender))


def test_a_new_generation_is_one_file(generations_dir, tmp_path):
    """A GPU of a generation that borrows Hopper's fit takes Hopper's fitted parameters where its profile is
    silent, and its own where it states them."""
    (generations_dir / "rubin.yaml").write_text("name: rubin\nborrows_from: hopper\n")
    hopper = yaml.safe_load((generations_dir / "hopper.yaml").read_text())["fit"]
    profile = yaml.safe_load((REPO / "hardware_profiles" / "b200.yaml").read_text())
    profile.update(name="r", generation="rubin", fit={"kernel_overhead_us": 1.25})
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(profile))
    gpu = load_hardware(str(path))
    assert "rubin" in generations.generation_names()
    assert (gpu.fit.gemm.flops_efficiency, gpu.fit.gemm.tile_m, gpu.fit.kernel_overhead_us) == (
        hopper["gemm"]["flops_efficiency"], hopper["gemm"]["tile_m"], 1.25)


@pytest.mark.parametrize(("text", "expected"), [
    ("name: other\nborrows_from: hopper\n", r"bad\.yaml: name: 'other' must be the file's stem 'bad'"),
    ("name: bad\nborrows_from: nowhere\n", r"bad\.yaml: borrows_from: 'nowhere' is not a generation with a fit"),
    ("name: bad\nborrows_from: ada\n", r"borrows_from: 'ada' is not a generation with a fit"),  # ada borrows
    ("name: bad\nfit: {gemm: {flops_efficiency: 0.5}}\nborrows_from: hopper\n", r"bad\.yaml: .*give either fit"),
    ("name: bad\nsfu_exp_per_bf16_flop: 0.004\nfit: {gemm: {flops_efficiency: 0.5}}\n",
     r"bad\.yaml: fit\.bandwidth_efficiency: required field is missing"),  # a generation's fit is whole
    ("name: bad\nsfu_exp_per_bf16_flop: 0.004\nborrows_from: hopper\n", r"bad\.yaml: .*goes with a fit"),
    ("name: bad\n", r"bad\.yaml: .*give either fit"),
])
def test_a_bad_generation_file_is_one_line_naming_it(generations_dir, text, expected):
    (generations_dir / "bad.yaml").write_text(text)
    with pytest.raises(LLMSimError, match=expected) as caught:
        generations.generation_names()
    assert "\n" not in str(caught.value)
