"""Attributing a forward's GPU kernels (kzcore.evaluate.gpuwork): the candidate's own, housekeeping, or
foreign. The profiling itself needs a GPU (tests/test_gpu.py); attribution and verdicts are tested here."""

from __future__ import annotations

from kzcore.evaluate.gpuwork import classify

CUBLAS = "nvjet_tst_128x256_64x4_2x1_v_bz_coopB_NNN"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"


def test_own_kernels_are_matched_by_name_inside_a_mangled_name():
    work = classify([("_Z11relu_kernelPKfPfi", 50.0), ("relu_kernel", 30.0)], ["relu_kernel"])
    assert work.own_us == 80.0 and not work.foreign
    assert work.verdict() is None


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
