"""Pure parts of the Triton layer; serving itself is covered by the end-to-end tests."""

import pytest

from ge_python_backend.triton.instance import instance_index, pick_device


@pytest.mark.parametrize(
    ("name", "index"), [("resnet_0_0", 0), ("resnet_0_3", 3), ("my_model_1_12", 12)]
)
def test_instance_index_is_the_last_number_of_the_instance_name(name: str, index: int) -> None:
    assert instance_index(name) == index


def test_instance_index_rejects_names_without_an_index() -> None:
    with pytest.raises(ValueError, match="model_instance_name"):
        instance_index("resnet")


def test_instances_round_robin_over_device_ids() -> None:
    devices = [pick_device("0, 1,3", f"m_0_{k}") for k in range(5)]
    assert devices == [0, 1, 3, 0, 1]


def test_empty_device_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="device_ids"):
        pick_device(" , ", "m_0_0")
