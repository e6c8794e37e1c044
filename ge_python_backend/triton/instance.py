"""One Triton model instance serving an `.om` through a runtime `Session`.

`model_templates/model.py` delegates to `ModelInstance`; `pb_utils` (Triton's
`triton_python_backend_utils`) is passed in because it only exists inside the Python backend stub.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from ge_python_backend.repository.config import (
    PIPELINE_DEPTHS,
    compare_config_with_session,
    read_parameters,
)
from ge_python_backend.runtime import AclError, InputError, Session
from ge_python_backend.triton.metrics import MetricsPublisher
from ge_python_backend.triton.requests import (
    ParsedRequest,
    build_response,
    error_response,
    parse_request,
)


def instance_index(instance_name: str) -> int:
    """Index of an instance within its group: Triton names instances `<group>_<index>`."""
    suffix = instance_name.rsplit("_", 1)[-1]
    if not suffix.isdigit():
        raise ValueError(
            f"cannot read an instance index from model_instance_name {instance_name!r}"
        )
    return int(suffix)


def pick_device(device_ids: str, instance_name: str) -> int:
    """Instance k of a group uses device_ids[k % len(device_ids)].

    Triton passes device id 0 for KIND_CPU instances, so NPU ids come from the model parameters.
    """
    ids = [int(part) for part in device_ids.split(",") if part.strip()]
    if not ids:
        raise ValueError(f"parameter device_ids must list NPU ids, e.g. '0,1'; got {device_ids!r}")
    return ids[instance_index(instance_name) % len(ids)]


class ModelInstance:
    """Loads the `.om` for one instance, checks the config against it and serves requests."""

    def __init__(self, args: dict[str, str], pb_utils: Any) -> None:
        self._pb_utils = pb_utils
        config = json_format.ParseDict(
            json.loads(args["model_config"]),
            model_config_pb2.ModelConfig(),
            ignore_unknown_fields=True,
        )
        params = read_parameters(config)
        try:
            om_path = Path(args["model_repository"]) / args["model_version"] / params["om_file"]
            device_id = pick_device(params.get("device_ids", "0"), args["model_instance_name"])
            depth = params.get("pipeline_depth", "1")
            if depth not in map(str, PIPELINE_DEPTHS):
                raise ValueError(f"pipeline_depth must be one of {PIPELINE_DEPTHS}, got {depth!r}")
        except (KeyError, ValueError) as exc:
            raise pb_utils.TritonModelException(
                f"model {args['model_name']!r}: bad config.pbtxt parameters: {exc}"
            ) from exc
        try:
            self.session = Session(
                om_path,
                device_id=device_id,
                runtime=params.get("acl_runtime"),
                sha256=params.get("om_sha256") or None,
                pipeline_depth=int(depth),
            )
        except Exception as exc:
            raise pb_utils.TritonModelException(
                f"model {args['model_name']!r}: cannot load {om_path}: {exc}"
            ) from exc
        problems = compare_config_with_session(
            config, self.session.inputs, self.session.outputs, self.session.gears
        )
        if problems:
            self.session.close()
            raise pb_utils.TritonModelException(
                f"model {args['model_name']!r}: config.pbtxt does not match {om_path.name}: "
                + "; ".join(problems)
            )
        self._output_names = tuple(spec.name for spec in self.session.outputs)
        labels = {
            "model": args["model_name"],
            "version": args["model_version"],
            "device": str(device_id),
        }
        self._metrics = MetricsPublisher(pb_utils, labels, self.session.counters)
        self._completions: queue.Queue[Any] | None = None
        self._completer: threading.Thread | None = None
        if int(depth) > 1:
            # Bounded: with the lanes, at most 2 * depth batches wait for their responses.
            self._completions = queue.Queue(maxsize=int(depth))
            self._completer = threading.Thread(
                target=self._complete, name="ge-completions", daemon=True
            )
            self._completer.start()

    def execute(self, requests: list[Any]) -> list[Any] | None:
        """Validate each request alone, run the good ones together, answer every request.

        At pipeline depth 2 the batch is submitted and `None` returned: responses go out through
        each request's response sender from the completion thread when the batch completes.
        """
        if self._completions is not None:
            self._submit(requests)
            if self._metrics.due():
                self._metrics.flush(self.session.counters)
            return None
        responses: list[Any] = [None] * len(requests)
        accepted: list[ParsedRequest] = []
        for index, request in enumerate(requests):
            try:
                parsed = parse_request(request, index, self._output_names)
                self.session.validate(parsed.feeds)
            except InputError as exc:
                responses[index] = error_response(self._pb_utils, str(exc), "INVALID_ARG")
            else:
                accepted.append(parsed)
        if accepted:
            self._run(accepted, responses)
        if self._metrics.due():
            self._metrics.flush(self.session.counters)
        return responses

    def _run(self, accepted: list[ParsedRequest], responses: list[Any]) -> None:
        try:
            results = self.session.infer_many([parsed.feeds for parsed in accepted])
        except AclError as exc:
            for parsed in accepted:
                responses[parsed.index] = error_response(self._pb_utils, str(exc), "INTERNAL")
            return
        for parsed, outputs in zip(accepted, results):
            responses[parsed.index] = build_response(
                self._pb_utils, outputs, parsed.requested_outputs
            )

    def _submit(self, requests: list[Any]) -> None:
        """Depth 2: answer bad requests now, queue the good ones on the next lane."""
        pb_utils = self._pb_utils
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        accepted: list[tuple[ParsedRequest, Any]] = []
        for index, request in enumerate(requests):
            sender = request.get_response_sender()
            try:
                parsed = parse_request(request, index, self._output_names)
                self.session.validate(parsed.feeds)
            except InputError as exc:
                sender.send(error_response(pb_utils, str(exc), "INVALID_ARG"), flags=final)
            else:
                accepted.append((parsed, sender))
        if not accepted:
            return
        assert self._completions is not None
        try:
            pending = self.session.submit([parsed.feeds for parsed, _ in accepted])
        except Exception as exc:  # not expected after validation; never leave a request hanging
            for _, sender in accepted:
                sender.send(error_response(pb_utils, str(exc), "INTERNAL"), flags=final)
            return
        self._completions.put((pending, accepted))  # blocks while the queue is full

    def _complete(self) -> None:
        """Completion thread: wait for each batch in order and send its responses."""
        assert self._completions is not None
        pb_utils = self._pb_utils
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        while True:
            item = self._completions.get()
            if item is None:
                return
            pending, accepted = item
            try:
                results = pending.result()  # activates the context in this thread first
            except Exception as exc:
                for _, sender in accepted:
                    with contextlib.suppress(Exception):
                        sender.send(error_response(pb_utils, str(exc), "INTERNAL"), flags=final)
                continue
            for (parsed, sender), outputs in zip(accepted, results):
                try:
                    response = build_response(pb_utils, outputs, parsed.requested_outputs)
                except Exception as exc:
                    response = error_response(pb_utils, str(exc), "INTERNAL")
                with contextlib.suppress(Exception):  # e.g. the client went away
                    sender.send(response, flags=final)

    def close(self) -> None:
        """Release the session's device resources (Triton calls finalize once).

        At depth 2 the batches in flight are answered first.
        """
        if self._completions is not None and self._completer is not None:
            self._completions.put(None)
            self._completer.join()
            self._completions = None
        self._metrics.close()
        self.session.close()
