"""Triton Python-backend model `preprocess`: encoded images in, classifier-ready tensors out.

Copied by build.py to `<repository>/preprocess/1/model.py`. Input `image` TYPE_STRING [1] per
batch row: the bytes of a JPEG, PNG or any file PIL reads. Output `pixels` FP32 [3, 224, 224]:
RGB, resized to 224x224 (bilinear), scaled to 0..1 and normalised with the ImageNet mean and
standard deviation, channels first. A row that does not decode fails its own request only.
"""

import io

import numpy as np
import triton_python_backend_utils as pb_utils
from PIL import Image, UnidentifiedImageError

IMAGE_SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def preprocess(data):
    """Encoded image bytes -> FP32 [3, 224, 224]."""
    with Image.open(io.BytesIO(data)) as image:
        rgb = image.convert("RGB").resize((IMAGE_SIZE, IMAGE_SIZE), Image.BILINEAR)
    pixels = np.asarray(rgb, np.float32) / 255.0
    return ((pixels - MEAN) / STD).transpose(2, 0, 1)


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, "image").as_numpy()  # object [n, 1]
            try:
                batch = np.stack([preprocess(bytes(row[0])) for row in rows]).astype(np.float32)
            except (UnidentifiedImageError, OSError, ValueError) as exc:
                error = pb_utils.TritonError(
                    f"preprocess: cannot decode the image bytes: {exc}",
                    pb_utils.TritonError.INVALID_ARG,
                )
                responses.append(pb_utils.InferenceResponse(output_tensors=[], error=error))
                continue
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("pixels", batch)]))
        return responses
