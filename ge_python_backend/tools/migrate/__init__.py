"""`ge-python-model migrate`: turn a Triton model repository into one served on Ascend NPUs.

`source` reads the source repository and classifies its models, `preflight` checks an ONNX
graph against what ATC accepts, `atc` plans (and runs) the ATC command of each version, `runner`
converts or copies every model and `report` writes MIGRATION.md and migration.json.
"""
