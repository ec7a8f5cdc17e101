"""Attributing a forward's GPU kernels (kzcore.evaluate.gpuwork): the candidate's own, housekeeping, or
foreign. The profiling itself needs a GPU (tests/test_gpu.py); attribution and verdicts are tested here."""

from __future__ import annotations

import pytest

from kzcore.evaluate.gpuwork import classify, kernel_identifier

CUBLAS = "nvjet_tst_128x256_64x4_2x1_v_bz_coopB_NNN"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"


def test_own_kernels_are_matched_by_their_identifier_plain_mangled_or_demangled():
    work = classify(
        [("_Z11relu_kernelPKfPfi", 50.0), ("relu_kernel", 30.0), ("void relu_kernel<128>(float const*, int)", 5.0)],
        ["relu_kernel"],
    )
    assert work.own_us == 85.0 and not work.foreign
    assert work.verdict() is None


@pytest.mark.parametrize(
    ("name", "identifier"),
    [
        ("add_kernel", "add_kernel"),
        ("_ZN2ns6kernelEv", "ns::kernel"),
        ("void my_kernel<128>(float const*, float*, int)", "my_kernel"),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, float const*, int)",
            "at::native::{anonymous}::cunn_SoftMaxForward",
        ),
        ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm>(Params)", "cutlass::Kernel2"),
    ],
)
def test_kernel_identifier(name, identifier):
    assert kernel_identifier(name) == identifier


def test_a_library_kernel_is_not_claimed_by_a_name_that_is_part_of_its_own():
    """The candidate names its kernels after pieces of library kernels' names: none of those kernels is its."""
    softmax = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*, float const*, int)"
    for own in ("cunn_SoftMaxForward", "SoftMax", "e", "void", "at"):
        work = classify([(own if own != "void" else "x", 1.0), (softmax, 500.0)], [own])
        assert softmax in work.foreign, own
        assert work.verdict() is not None


def test_kernels_beyond_the_counted_launches_are_foreign_even_when_named_as_the_candidates():
    """A candidate kernel named exactly like a library kernel, launched once: the profile shows two kernels of
    that name, the launch counter one, so the longer one is someone else's."""
    named = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n"
    work = classify([(named, 2.0), (named, 800.0)], [named], own_launches=1)
    assert work.own_us == 2.0 and work.foreign_us == 800.0
    assert work.verdict() is not None
    assert classify([(named, 2.0), (named, 800.0)], [named], own_launches=2).verdict() is None


def test_fills_and_copies_are_housekeeping_not_foreign():
    work = classify(
        [("softmax_kernel", 40.0), (FILL, 30.0), ("Memcpy DtoD (Device -> Device)", 20.0)], ["softmax_kernel"]
    )
    assert work.housekeeping_us == 50.0 and work.foreign_us == 0.0
    assert work.verdict() is None


def test_mostly_foreign_work_is_flagged_with_the_kernels_named():
    work = classify([("copy_kernel", 5.0), (CUBLAS, 900.0)], ["copy_kernel"])
    message = work.verdict()
    assert message is not None
    assert "99% of the forward's GPU time" in message and "nvjet_tst" in message


def test_a_small_share_or_a_tiny_foreign_kernel_is_not_flagged():
    assert classify([("mine", 1000.0), ("aten_reduce", 50.0)], ["mine"]).verdict() is None  # 4.8 %
    assert classify([("mine", 1.0), ("aten_reduce", 5.0)], ["mine"]).verdict() is None  # 5 us: noise
    assert classify([("mine", 100.0), ("aten_reduce", 40.0)], ["mine"]).verdict() is not None  # 29 %


def test_no_names_means_everything_non_housekeeping_is_foreign():
    work = classify([("relu_kernel", 100.0)], [])
    assert work.foreign == {"relu_kernel": 100.0}
    assert classify([("relu_kernel", 100.0)], [""]).foreign == {"relu_kernel": 100.0}


# -- work left running on a stream nobody waits for (the timer's end event is on the calling stream) -----------
MARK = "void at::cuda::(anonymous namespace)::spin_kernel(long)"


def _events(*spans):
    from kzcore.evaluate.gpuwork import GpuEvent

    return [GpuEvent(name, end - start, stream, start, end) for name, stream, start, end in spans]


def test_work_on_the_calling_stream_or_a_joined_side_stream_is_not_flagged():
    from kzcore.evaluate.gpuwork import side_stream_verdict, split_marker

    # relu on stream 7; a side-stream kernel (stream 13) that ended before the marker: it was waited for
    events, marker = split_marker(
        _events(("relu_kernel", 7, 0.0, 50.0), ("side_kernel", 13, 10.0, 400.0), (MARK, 7, 401.0, 402.0))
    )
    assert marker is not None and marker.start_us == 401.0 and len(events) == 2
    assert side_stream_verdict(events, marker) is None


def test_work_still_running_on_a_side_stream_when_the_marker_starts_is_flagged():
    from kzcore.evaluate.gpuwork import side_stream_verdict, split_marker

    events, marker = split_marker(
        _events(("fill", 7, 0.0, 2.0), ("relu_kernel", 13, 5.0, 900.0), (MARK, 7, 20.0, 21.0))
    )
    message = side_stream_verdict(events, marker)
    assert message is not None and "relu_kernel" in message and "stream 13" in message
    assert "wait_stream" in message


def test_the_last_spin_kernel_is_the_marker_and_none_means_the_check_cannot_run():
    from kzcore.evaluate.gpuwork import side_stream_verdict, split_marker

    # the candidate's own _sleep on a side stream started first; the marker is the later one
    events, marker = split_marker(_events((MARK, 13, 0.0, 1000.0), (MARK, 7, 30.0, 31.0)))
    assert marker.start_us == 30.0
    assert side_stream_verdict(events, marker) is not None  # its own spin ran past the marker
    events, marker = split_marker(_events(("relu_kernel", 7, 0.0, 50.0)))
    assert marker is None and side_stream_verdict(events, marker) is None
