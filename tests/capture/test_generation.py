"""Generation without a KV cache, cached generation and one-sample inference told apart by input shapes alone."""

from __future__ import annotations

import pytest

from advisor.capture.between import BetweenSteps
from advisor.capture.generation import MAX_SHAPES, MIN_GROWTH, MIN_ONE_SAMPLE, CallPattern, classify

MODULE = ("train.py", "<module>", 1)
GENERATE = ("train.py", "generate", 40)


def _prefix(batch, prompt, tokens, crop=None):
    """Shapes of a lecture-style generate(): the prefix grows by one per token, cropped to ``crop``."""
    return [(batch, min(prompt + i, crop or prompt + i)) for i in range(tokens)]


def test_a_growing_prefix_is_generation_without_a_cache():
    v = classify(_prefix(1, 1, 20))
    assert (v.pattern, v.dim, v.batch, v.positions) == (CallPattern.GENERATION_NO_CACHE, 1, 1, 10.5)


def test_the_crop_to_the_context_window_and_new_prompts_stay_generation():
    # 60 tokens from a 1-token prompt, cropped at block_size 8: 7 growths, then 52 calls of 8
    assert classify(_prefix(4, 1, 60, crop=8)).pattern == CallPattern.GENERATION_NO_CACHE
    # three samples one after the other, each from a new 3-token prompt
    assert classify(_prefix(1, 3, 10) * 3).pattern == CallPattern.GENERATION_NO_CACHE
    # embeddings in, (batch, positions, features): the growing dimension is found
    assert classify([(2, n, 64) for n in range(5, 15)]).dim == 1


def test_a_prompt_then_one_position_per_call_is_cached_generation():
    shapes = [(1, 12)] + [(1, 1)] * 30
    v = classify(shapes)
    assert v.pattern == CallPattern.GENERATION_CACHED and v.pattern != CallPattern.GENERATION_NO_CACHE
    # two samples, each with its prompt
    assert classify(shapes * 2).pattern == CallPattern.GENERATION_CACHED
    # batch of 1, many calls, yet a cached generation is not one-sample inference
    assert classify([(1, 5)] + [(1, 1)] * (MIN_ONE_SAMPLE * 2)).pattern == CallPattern.GENERATION_CACHED


def test_fixed_length_evaluation_is_no_pattern():
    assert classify([(64, 256)] * 200).pattern == CallPattern.OTHER
    # a last, shorter batch changes the batch dimension: still no pattern
    assert classify([(64, 256)] * 20 + [(17, 256)]).pattern == CallPattern.OTHER
    # images: nothing grows
    assert classify([(32, 3, 28, 28)] * 50).pattern == CallPattern.OTHER


def test_too_few_growths_or_a_mixture_is_no_generation():
    assert classify(_prefix(1, 1, MIN_GROWTH)).pattern == CallPattern.OTHER  # MIN_GROWTH - 1 growths
    assert classify(_prefix(1, 1, MIN_GROWTH + 1)).pattern == CallPattern.GENERATION_NO_CACHE
    # lengths that wander (bucketed evaluation) with a few +1 steps among them
    wander = [(8, n) for n in (10, 11, 12, 13, 14, 30, 7, 22, 9, 40, 41, 5, 19, 26, 3, 33)]
    assert classify(wander).pattern == CallPattern.OTHER


def test_many_single_samples_are_one_sample_inference():
    assert classify([(1, 3, 32, 32)] * MIN_ONE_SAMPLE).pattern == CallPattern.ONE_SAMPLE
    assert classify([(1, 1, 28, 28)] * MIN_ONE_SAMPLE).pattern == CallPattern.ONE_SAMPLE  # a channel of 1 is no sequence
    assert classify([(1, 3, 32, 32)] * (MIN_ONE_SAMPLE - 1)).pattern == CallPattern.OTHER
    # one element per call: a decoding step whose state the model keeps, not a sample
    assert classify([(1, 1)] * 100).pattern == CallPattern.OTHER
    # an unbatched input has no batch dimension to read
    assert classify([(128,)] * 100).pattern == CallPattern.OTHER


@pytest.mark.parametrize("shapes", [[], [(1, 4)], [(1, 4), ()], [(1, 4), (1, 4, 2)]])
def test_too_little_or_mixed_input_is_no_pattern(shapes):
    assert classify(shapes).pattern == CallPattern.OTHER


def test_the_tracker_keeps_an_occurrences_shapes_lines_and_time():
    tracker = BetweenSteps(loop=(MODULE,))
    t = 0.0
    for shape in [(1, 4)] + _prefix(1, 5, 20):  # a prompt at line 44, then the loop's call at line 46
        tracker.shape = shape
        line = 44 if shape == (1, 4) else 46
        tracker.call(0, t, t + 0.01, ((*MODULE, 99), (*GENERATE, line)))
        t += 0.02  # sampling between the calls
    tracker.call(0, t, t + 0.5, ((*MODULE, 99), ("train.py", "log_images", 70, 75)))  # another function, no shape
    gen, other = (w.site for w in tracker.records())
    assert (gen.function, gen.line, gen.calls, gen.pattern, gen.tokens) == (
        "generate", 46, 21, CallPattern.GENERATION_NO_CACHE, 21)
    assert gen.seconds == pytest.approx(0.41)  # first call's start to the last's end
    assert (other.function, other.line, other.pattern, other.tokens) == ("log_images", 75, CallPattern.OTHER, 0)
    assert tracker.shape is None  # read once


def test_a_long_generation_is_judged_on_its_first_shapes_and_counted_whole():
    tracker = BetweenSteps(loop=(MODULE,))
    for i, shape in enumerate(_prefix(2, 1, MAX_SHAPES + 500, crop=64)):
        tracker.shape = shape
        tracker.call(5, i * 0.01, i * 0.01 + 0.005, ((*MODULE, 99), (*GENERATE, 46)))
    (work,) = tracker.records()
    assert (work.site.pattern, work.site.calls, work.site.tokens) == (
        CallPattern.GENERATION_NO_CACHE, MAX_SHAPES + 500, 2 * (MAX_SHAPES + 500))
