"""The names behind the torch-does-the-work rule: allowed library ops by base name, matmul as one family, fused extras recorded."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernelzero.gpu_workers.instruments import LaunchLog, OpRecorder, base_op, op_family


def recorded(fn, *args) -> tuple[list[str], list[str]]:
    recorder = OpRecorder(LaunchLog())
    with torch.no_grad(), recorder:
        fn(*args)
    return recorder.compute_ops, recorder.implied


def test_backend_names_reduce_to_their_base_but_fused_activations_do_not() -> None:
    assert {base_op(n) for n in ("convolution", "_convolution", "cudnn_convolution", "convolution_overrideable",
                                 "mkldnn_convolution", "cudnn_convolution_transpose")} == {"convolution"}
    assert base_op("cudnn_convolution_relu") == "convolution_relu"  # not an allowed op: torch would do the relu
    assert base_op("cudnn_convolution_add_relu") == "convolution_add_relu"
    assert base_op("_addmm_activation") == "addmm_activation"


def test_every_matrix_product_is_one_family() -> None:
    assert {op_family(n) for n in ("mm", "bmm", "addmm", "baddbmm", "mv", "matmul", "_scaled_mm")} == {"matmul"}
    assert op_family("relu") == "relu" and op_family("convolution") == "convolution"


def test_fused_library_calls_record_what_they_also_do() -> None:
    x, w, b = torch.randn(4, 8), torch.randn(8, 3), torch.randn(3)
    assert recorded(torch.addmm, b, x, w) == (["addmm"], ["add"])
    assert recorded(lambda: torch.addmm(b, x, w, alpha=2.0)) == (["addmm"], ["add", "mul"])
    assert recorded(lambda: torch.addmm(b, x, w, beta=0)) == (["addmm"], [])
    assert recorded(torch.mm, x, w) == (["mm"], [])
    image, kernel = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    assert recorded(F.conv2d, image, kernel, torch.randn(3)) == (["convolution"], ["add"])
    assert recorded(F.conv2d, image, kernel) == (["convolution"], [])


def test_a_linear_layer_is_an_addmm_with_its_bias_add() -> None:
    layer = torch.nn.Linear(8, 3)
    ops, implied = recorded(layer, torch.randn(4, 8))
    assert ops == ["addmm"] and implied == ["add"]
