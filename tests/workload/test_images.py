"""Images in generated requests (``workload.images``): their tokens join the prompt, their draws are seeded and
leave the other draws alone, and a bad section is one line."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.config.workload import WorkloadConfig
from simulator.errors import LLMSimError
from simulator.workload import generate_requests
from tests.helpers import experiment

BASE = {"num_requests": 2_000, "arrival": {"kind": "poisson", "rate": 5.0},
        "input_tokens": {"kind": "uniform", "min": 10, "max": 300}, "output_tokens": {"kind": "fixed", "value": 7}}
IMAGES = {"per_request": {"kind": "pmf", "values": [0, 1, 4], "probabilities": [0.25, 0.5, 0.25]},
          "tokens_per_image": {"kind": "uniform", "min": 4, "max": 1280}}


def _generate(images=IMAGES, seed=7, **section):
    return generate_requests(WorkloadConfig(**{**BASE, **section, "images": images}), np.random.SeedSequence(seed))


def test_a_requests_prompt_is_its_text_plus_its_images():
    fixed = {"per_request": {"kind": "fixed", "value": 2}, "tokens_per_image": {"kind": "fixed", "value": 100}}
    workload = _generate(fixed, input_tokens={"kind": "fixed", "value": 50})
    assert (workload.input_tokens == 50 + 2 * 100).all()
    assert all(images == (100, 100) for images in workload.images)


def test_images_are_drawn_from_their_own_stream():
    """Adding images changes neither the arrivals nor the text nor the outputs; the prompt grows by exactly the
    images' tokens; the counts follow the PMF (2,000 draws: each share within 0.04 of 1/4, 1/2, 1/4)."""
    text = generate_requests(WorkloadConfig(**BASE), np.random.SeedSequence(7))
    workload = _generate()
    assert np.array_equal(workload.arrival_s, text.arrival_s)
    assert np.array_equal(workload.output_tokens, text.output_tokens)
    image_tokens = np.array([sum(images) for images in workload.images])
    assert np.array_equal(workload.input_tokens - image_tokens, text.input_tokens)
    counts = np.array([len(images) for images in workload.images])
    assert set(counts.tolist()) <= {0, 1, 4}
    for value, share in ((0, 0.25), (1, 0.5), (4, 0.25)):
        assert np.mean(counts == value) == pytest.approx(share, abs=0.04)
    tokens = [t for images in workload.images for t in images]
    assert min(tokens) >= 4 and max(tokens) <= 1280


def test_the_same_seed_draws_the_same_images():
    first, second, other = _generate(), _generate(), _generate(seed=8)
    assert first.images.tolist() == second.images.tolist()
    assert np.array_equal(first.input_tokens, second.input_tokens)
    assert first.images.tolist() != other.images.tolist()


@pytest.mark.parametrize(("images", "message"), [
    ({"per_request": {"kind": "pmf", "values": [0, 1], "probabilities": [0.5, 0.6]},
      "tokens_per_image": {"kind": "fixed", "value": 4}}, "sum to 1, got sum 1.1"),
    ({"per_request": {"kind": "pmf", "values": [1, 1], "probabilities": [0.5, 0.5]},
      "tokens_per_image": {"kind": "fixed", "value": 4}}, "values must increase"),
    ({"per_request": {"kind": "pmf", "values": [0, 1], "probabilities": [1.0]},
      "tokens_per_image": {"kind": "fixed", "value": 4}}, "2 values but 1 probabilities"),
    ({"per_request": {"kind": "fixed", "value": 5000}, "tokens_per_image": {"kind": "fixed", "value": 4}},
     "must be <= 4096, got 5000"),
    ({"per_request": {"kind": "fixed", "value": 1}, "tokens_per_image": {"kind": "fixed", "value": 0}},
     "must be >= 1, got 0"),
    ({"per_request": {"kind": "fixed", "value": 1}}, "tokens_per_image"),
])
def test_a_bad_images_section_is_one_line(images, message):
    from simulator import load

    with pytest.raises(LLMSimError) as error:
        load(experiment(workload={**BASE, "images": images}))
    text = str(error.value)
    assert "\n" not in text and "workload.images" in text and message in text


def test_images_come_with_generated_requests_only():
    with pytest.raises(ValueError, match="images are drawn for generated requests; not with sessions"):
        WorkloadConfig(**BASE, images=IMAGES, sessions={"turns": {"kind": "fixed", "value": 2}})


def test_a_workload_without_images_has_none():
    assert generate_requests(WorkloadConfig(**BASE), np.random.SeedSequence(7)).images is None


def test_an_image_count_of_zero_adds_nothing():
    none = {"per_request": {"kind": "fixed", "value": 0}, "tokens_per_image": {"kind": "fixed", "value": 64}}
    workload = _generate(none)
    text = generate_requests(WorkloadConfig(**BASE), np.random.SeedSequence(7))
    assert np.array_equal(workload.input_tokens, text.input_tokens) and set(workload.images.tolist()) == {()}
