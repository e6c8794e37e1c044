"""`ge-python-model migrate`: a Triton model repository turned into an Ascend one."""
