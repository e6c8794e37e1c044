"""`ge-python-model migrate`: a GPU team's Triton model repository turned into an Ascend one."""
