"""`Session(image=...)` on the emulator: which inputs can take JPEG files, what the feed checks
say, and batches in a row reusing the stage's pictures (tests/test_jpeg_e2e.py serves them
through tritonserver and compares every answer with the host's)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import onnx_models
import pytest

from ge_python_backend import emulator
from ge_python_backend.emulator.omfile import compile_onnx
from ge_python_backend.runtime import InputError, ModelFileError, Session
from ge_python_backend.runtime.dvpp import ImageError, ImageInput, letterbox

Image = pytest.importorskip("PIL.Image", reason="Pillow is the emulator extra's")
from jpeg_files import with_frame_size  # noqa: E402  (Pillow's)

AIPP = onnx_models.AIPP_YUV420SP_ANY_SIZE.replace(
    "input_format: YUV420SP_U8",
    "input_format: YUV420SP_U8\n    src_image_size_w: SRC_W\n    src_image_size_h: SRC_H\n"
    "    crop: true\n    crop_size_w: 16\n    crop_size_h: 16",
)


def classifier(directory: Path, w: int, h: int) -> Path:
    directory.mkdir()
    (directory / "aipp.cfg").write_text(AIPP.replace("SRC_W", str(w)).replace("SRC_H", str(h)))
    return compile_onnx(
        onnx_models.build_classifier(directory / "model.onnx"),
        directory / "model",
        insert_op_conf=directory / "aipp.cfg",
        input_shape="image:-1,3,16,16",
        dynamic_batch_size="1,2,4",
        **onnx_models.KEEP_FP32,
    )


def jpeg(width: int, height: int, value: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (value, 255 - value, value // 2)).save(out, "JPEG")
    return out.getvalue()


def files(*items: bytes) -> np.ndarray:
    return np.array([[item] for item in items], dtype=object)


def test_an_image_input_serves_bytes_and_reuses_its_pictures(tmp_path: Path) -> None:
    om = classifier(tmp_path / "m", 32, 32)
    with Session(om, runtime="emulator", image=ImageInput("image"), pipeline_depth=2) as session:
        (spec,) = session.inputs
        assert (spec.triton_dtype, spec.shape) == ("BYTES", (-1, 1))
        assert session.validate({"image": files(jpeg(40, 40, 1), jpeg(50, 40, 2))}) == 2
        with pytest.raises(InputError, match=r"takes JPEG files: a BYTES tensor"):
            session.validate({"image": np.zeros((1, 48, 32, 1), np.uint8)})
        # one colour per file: answers follow their file however batches reuse the pool
        single = {v: session.infer({"image": files(jpeg(64, 48, v))})["logits"] for v in (0, 200)}
        pending = [
            session.submit([{"image": files(jpeg(64, 48, v), jpeg(40, 80, 200 - v))}])
            for v in (0, 200, 0)
        ]
        for v, batch in zip((0, 200, 0), pending):
            logits = batch.result()[0]["logits"]
            np.testing.assert_allclose(logits[0], single[v][0], rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(logits[1], single[200 - v][0], rtol=1e-5, atol=1e-5)
        with pytest.raises(ImageError, match=r"file 1 \(of 2 in this request\).*148052") as caught:
            progressive = io.BytesIO()
            Image.new("RGB", (64, 64)).save(progressive, "JPEG", progressive=True)
            session.infer_many(
                [
                    {"image": files(jpeg(64, 48, 3))},
                    {"image": files(jpeg(64, 48, 3), progressive.getvalue())},
                ]
            )
        assert (caught.value.request, caught.value.file, caught.value.code) == (1, 1, 148052)


def test_only_rows_vpc_can_write_in_place_are_served(tmp_path: Path) -> None:
    om = classifier(tmp_path / "odd", 24, 16)  # width 24: not VPC's width stride of 16
    with pytest.raises(ModelFileError, match=r"24x16.*multiple of 16"):
        Session(om, runtime="emulator", image=ImageInput("image"))
    with pytest.raises(ModelFileError, match=r"'pixels' is not an input of the model"):
        Session(classifier(tmp_path / "ok", 32, 32), runtime="emulator", image=ImageInput("pixels"))


def test_an_input_without_yuv420sp_aipp_cannot_take_images(om_aipp_rgb: Path) -> None:
    with pytest.raises(ModelFileError, match=r"needs a static AIPP with input_format YUV420SP_U8"):
        Session(om_aipp_rgb, runtime="emulator", image=ImageInput("image"))


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ((100, 50), (0, 8, 32, 16)),  # wide: full width, centred rows (even offsets)
        ((50, 100), (8, 0, 16, 32)),
        ((64, 64), (0, 0, 32, 32)),
        ((8000, 40), (0, 12, 32, 6)),  # never below VPC's smallest output (10 x 6)
    ],
)
def test_letterbox_keeps_the_aspect_on_even_bounds(
    size: tuple[int, int], expected: tuple[int, int, int, int]
) -> None:
    assert letterbox(*size, 32, 32) == expected


def test_a_picture_grown_while_the_last_batch_still_reads_it_waits_for_that_batch(
    tmp_path: Path,
) -> None:
    # depth 2: batch 2's decode may run before batch 1's VPC jobs; a larger file grows (frees
    # and re-allocates) the picture batch 1's VPC job still reads, which must wait for it
    om = classifier(tmp_path / "m", 32, 32)
    with Session(om, runtime="emulator", image=ImageInput("image"), pipeline_depth=2) as session:
        single = {v: session.infer({"image": files(jpeg(40, 40, v))})["logits"] for v in (0, 200)}
        pending = [
            session.submit([{"image": files(jpeg(side, side, v))}])
            for side, v in ((48, 0), (400, 200), (800, 0))
        ]
        for (_, v), batch in zip(((48, 0), (400, 200), (800, 0)), pending):
            logits = batch.result()[0]["logits"]
            np.testing.assert_allclose(logits[0], single[v][0], rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    ("resize", "size", "words"),
    [
        (
            "stretch",
            (8192, 8192),
            "the JPEG is 8192x8192, decoded to 8192x8192: VPC would resize 8192x8192 to 32x32 "
            "(by 1/256 x 1/256); VPC scales each side by 1/32 to 16 (Ascend310P)",
        ),
        (
            "stretch",
            (4097, 64),
            "the JPEG is 4097x64, decoded to 4096x64: VPC would resize 4096x64 to 32x32 "
            "(by 1/128 x 1/2)",
        ),
        ("stretch", (8193, 64), "the JPEG is 8193x64; JPEGD decodes 32x32 to 8192x8192"),
        ("letterbox", (8192, 40), "VPC would resize 8192x40 to 32x6 (by 1/256 x 1/6.67)"),
    ],
)
def test_sizes_dvpp_refuses_are_refused_from_the_header_before_any_decode(
    tmp_path: Path, resize: str, size: tuple[int, int], words: str
) -> None:
    # the header says `size`, the scan is a 64 x 64 one: a decode would fail with 500001
    huge = with_frame_size(jpeg(64, 64, 9), *size)
    om = classifier(tmp_path / "m", 32, 32)
    with Session(om, runtime="emulator", image=ImageInput("image", resize)) as session:
        session.infer({"image": files(jpeg(64, 48, 3))})
        decodes = emulator.stats()["jpegd_calls"]
        with pytest.raises(ImageError, match=r"file 1 \(of 2 in this request\)") as caught:
            session.infer_many(
                [
                    {"image": files(jpeg(64, 48, 3))},
                    {"image": files(jpeg(40, 40, 5), huge)},
                ]
            )
        assert words in str(caught.value)
        assert (caught.value.request, caught.value.file, caught.value.code) == (1, 1, None)
        # request 0's file and request 1's first were queued; the huge one never reached JPEGD
        assert emulator.stats()["jpegd_calls"] == decodes + 2
        assert session.infer({"image": files(jpeg(64, 48, 3))})["logits"].shape == (1, 10)


def test_the_limits_are_the_devices_soc_family(
    tmp_path: Path, clean_acl: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GE_EMULATOR_SOC", "Ascend910B2")
    huge = with_frame_size(jpeg(64, 64, 9), 8192, 8192)
    om = classifier(tmp_path / "m", 32, 32)
    session = Session(om, runtime="emulator", image=ImageInput("image"))
    with session, pytest.raises(ImageError, match=r"by 1/32 to 16 \(Ascend910B\)"):
        session.infer({"image": files(huge)})
