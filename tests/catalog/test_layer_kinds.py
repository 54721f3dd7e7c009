"""A new attention kind added in one file (``tests/catalog/toy_layer_kind.py``, the recipe of docs/extending.md)
loads from a model YAML, is counted, sized and priced through its hooks, and reports its errors on one line.

The toy model (hand numbers): D = 512, 1,000 tokens of vocabulary (untied), a dense gated MLP of 1,024 in every
layer; 2 layers of ``toy`` attention over the whole context and 2 over a window of 256, each 8 heads of 64 and a
shared KV vector of 96 elements. Per layer: attention 512·8·64 + 512·96 + 8·64·512 = 573,440, MLP 3·512·1,024 =
1,572,864, two norms 1,024: 2,147,328; × 4 layers, + 2·1,000·512 embeddings + a final norm of 512 = 9,613,824.
"""

from __future__ import annotations

import pytest

import simulator
from simulator.catalog import load_hardware, load_model
from simulator.catalog.layers import ATTENTION_KINDS
from simulator.cluster.pool_setup import check_parallelism
from simulator.cost.base import IterationShape
from simulator.cost.roofline import RooflineCostModel
from simulator.errors import ConfigError, LLMSimError
from tests.catalog.toy_layer_kind import ToyAttention
from tests.helpers import experiment

TOY = {"kind": "toy", "num_heads": 8, "head_dim": 64, "latent": 96}
MLP = "ffn: {kind: dense, intermediate_size: 1024}"


def _model(tmp_path, *attentions: str, name: str = "toy-model"):
    path = tmp_path / f"{name}.yaml"
    groups = "".join(f"  - {{count: 2, attention: {a}, {MLP}}}\n" for a in attentions)
    path.write_text(f"name: {name}\nhidden_size: 512\nvocab_size: 1000\nmax_position_embeddings: 4096\n"
                    f"layers:\n{groups}")
    return path


def _toy(**fields) -> str:
    return "{" + ", ".join(f"{key}: {value}" for key, value in {**TOY, **fields}.items()) + "}"


def test_a_kind_in_one_file_loads_from_yaml_with_its_counts(tmp_path):
    model = load_model(str(_model(tmp_path, _toy(), _toy(window=256))))
    assert [type(g.attention) for g in model.layers] == [ToyAttention, ToyAttention]
    assert model.num_params == 9_613_824
    assert [g.attention.label for g in model.layers] == ["toy", "toy(256)"]


def test_its_kv_is_sized_by_its_hooks(tmp_path):
    """96 elements × 2 bytes × 2 layers per group, not split by tensor parallelism; the windowed group holds at most
    256 tokens, so its bytes are a span's, not the pool's per-token size."""
    model = load_model(str(_model(tmp_path, _toy(), _toy(window=256))))
    assert model.kv_layout(2.0, 4) == (384.0, [(256, 384.0)])
    assert model.kv_bytes_per_token(2.0, 4) == 768.0
    summary = simulator.run(experiment(
        model=str(_model(tmp_path, _toy(), _toy(window=256))), cost_model={"kind": "roofline"},
        kv_cache={"kind": "paged", "block_size": 16},
        workload={"num_requests": 8, "arrival": {"kind": "poisson", "rate": 20.0},
                  "input_tokens": {"kind": "fixed", "value": 300},
                  "output_tokens": {"kind": "fixed", "value": 20}})).summary
    assert summary["completed"] == 8


def test_it_is_priced_by_its_shapes_and_span(tmp_path):
    """Its GEMMs are the three it declares (and the MLP's two), at the GEMM model's price; a group whose span is
    bounded costs the same in decode at any context beyond its window, one over the whole context more."""
    hw = load_hardware("h100-sxm")
    windowed = RooflineCostModel(load_model(str(_model(tmp_path, _toy(window=256), name="w"))), hw, 2)
    group, gemm, T = windowed.groups[0], windowed.gemm, 64
    by_hand = 2 * (gemm.time(T, 256, 512) + gemm.time(T, 96, 512) + gemm.time(T, 512, 256)
                   + gemm.time(T, 1024, 512) + gemm.time(T, 512, 512))
    assert group.gemm_time(T) == pytest.approx(by_hand, rel=1e-12)
    decode = [windowed.iteration_time(IterationShape((), 8, 8 * context)) for context in (1000, 3000)]
    assert decode[0] == decode[1]
    whole = RooflineCostModel(load_model(str(_model(tmp_path, _toy(), name="f"))), hw, 2)
    assert whole.iteration_time(IterationShape((), 8, 8 * 3000)) > whole.iteration_time(IterationShape((), 8, 8000))


def test_its_tensor_parallel_rule_and_errors(tmp_path):
    model = load_model(str(_model(tmp_path, _toy())))
    check_parallelism(model, 8, 1)
    with pytest.raises(ConfigError, match=r"^cluster.tensor_parallel: 3 does not divide the 8 attention heads of "
                                          r"toy-model \(allowed: 1, 2, 4, 8\)$"):
        check_parallelism(model, 3, 1)
    for attention, problem in ((_toy(latent=0), r"layers\[0\]\.attention\.latent: must be > 0, got 0"),
                               (_toy(num_kv_heads=2), r"layers\[0\]\.attention\.num_kv_heads: unknown key \(did "
                                                      r"you mean 'num_heads'\? allowed: kind, num_heads, head_dim, "
                                                      r"latent, window\)"),
                               ("{kind: toi}", r"layers\[0\]\.attention: unknown kind 'toi' \(allowed: .*'toy'\)")):
        with pytest.raises(LLMSimError, match=problem) as error:
            load_model(str(_model(tmp_path, attention)))
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="attention kind 'toy' registered twice"):
        ATTENTION_KINDS.register("toy", config=ToyAttention)(ToyAttention)



def test_a_new_kind_is_one_module_in_the_layers_package(tmp_path):
    """A module dropped into simulator/catalog/layers/ registers its kind with no other file touched (in a copy of
    the package, in a fresh interpreter)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import simulator

    package = Path(simulator.__file__).parent
    shutil.copytree(package, tmp_path / "simulator", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "simulator" / "catalog" / "layers" / "probe.py").write_text(
        "from typing import Literal\n\n"
        "from simulator.catalog.layers.base import attention_kind\n"
        "from simulator.catalog.layers.softmax import SoftmaxAttention\n\n\n"
        "@attention_kind\nclass ProbeAttention(SoftmaxAttention):\n    kind: Literal['probe'] = 'probe'\n")
    code = "import simulator.catalog.layers as l; print('probe' in l.ATTENTION_KINDS.kinds())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                            env={"PYTHONPATH": str(tmp_path), "PATH": ""}, check=False)
    assert result.stdout.strip() == "True", result.stderr[-2000:]
