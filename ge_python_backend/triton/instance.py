"""One Triton model instance serving an `.om` through a session (`serving.ServingSession`): a
runtime `Session` in its own process, or, with `device_host` on, a `RemoteSession` in the device
host; both answer and fail alike.

`model_templates/model.py` delegates to `ModelInstance`; `pb_utils` (Triton's
`triton_python_backend_utils`) is passed in because it only exists inside the Python backend stub.

One path for every pipeline depth: the requests are submitted to the session together, a bad one
fails alone (answered INVALID_ARG; `Session.submit` names it, the others are submitted again),
and their responses are built from the batch's result. In the device host, an instance whose
`.om` changed on disk cannot open its session again after the host restarted: every request is
answered UNAVAILABLE with the reason (the watcher then reloads the model, whose load fails with
it). At depth 1 `execute` waits for the batch
and returns the responses; at depth 2 it returns `None` once the execution before this one has
left the device's execute engine (`Session.wait_ready`), and a completion thread answers through
each request's response sender: Triton forms the next batch while this one executes, from the
requests that arrived while the one before it ran.
Response senders cost the Python backend more than returned responses, so depth 2 pipelines only
while executions take at least `pipeline_min_device_us` on the device (mean over each metrics
interval, from the session's event times; it stops below half of that); shorter ones are
answered inline, as at depth 1. It starts inline (`pipeline_min_device_us` 0: pipelining) and
starts pipelining after two long intervals in a row, so executions never measured that long are
never pipelined.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ge_python_backend.allocator import map_large_blocks
from ge_python_backend.devicehost.client import RemoteSession
from ge_python_backend.errors import AclError, GeBackendError, InputError, ModelUnavailable
from ge_python_backend.modelinfo import SessionCounters, gears_text
from ge_python_backend.repository.parameters import (
    ModelParameters,
    describe_unknown_parameter,
    unknown_parameters,
)
from ge_python_backend.repository.triton_config import (
    ConfigError,
    TritonConfig,
    compare_config_with_session,
)
from ge_python_backend.repository.versions import expected_sha256, find_om
from ge_python_backend.runtime import ENV_VAR, Session
from ge_python_backend.serving import Completer, ServingBatch, ServingSession
from ge_python_backend.triton.log import forward_to_triton
from ge_python_backend.triton.metrics import MetricsPublisher
from ge_python_backend.triton.requests import (
    ParsedRequest,
    build_response,
    error_response,
    parse_request,
)

logger = logging.getLogger(__name__)


class ModelInstance:
    """Loads the `.om` for one instance, checks the config against it and serves requests."""

    def __init__(self, args: dict[str, str], pb_utils: Any) -> None:
        forward_to_triton(pb_utils)
        map_large_blocks()  # a batch's arrays go back to the system once answered
        self._pb_utils = pb_utils
        self._name = f"{args['model_name']!r} version {args['model_version']}"
        try:
            config = TritonConfig.from_json(args["model_config"])
        except ConfigError as exc:
            raise self._load_error(str(exc)) from exc
        try:
            params = ModelParameters.from_config(config)
            device_id = params.device_for_instance(args["model_instance_name"])
        except ValueError as exc:
            raise self._load_error(f"bad config.pbtxt parameters: {exc}") from exc
        for name in unknown_parameters(config):
            logger.warning(
                "model %s: config.pbtxt parameter %s is not one of ours or Triton's; ignored "
                "(a misspelt name leaves its setting at the default)",
                self._name,
                describe_unknown_parameter(name),
            )
        version_dir = Path(args["model_repository"]) / args["model_version"]
        try:  # each version serves its own .om, checked against its own checksum file
            om_path = find_om(version_dir, params.om_file)
            sha256 = expected_sha256(om_path, params)
        except ConfigError as exc:
            raise self._load_error(str(exc)) from exc
        opening: Callable[..., ServingSession] = Session
        if params.in_device_host:
            opening = functools.partial(
                RemoteSession, load_timeout_s=params.device_host_load_timeout_s
            )
        images = {} if params.image is None else {"image": params.image}
        try:
            self.session = opening(
                om_path,
                device_id=device_id,
                runtime=params.acl_runtime,
                sha256=sha256,
                pipeline_depth=params.pipeline_depth,
                execute_timeout_ms=params.execute_timeout_ms,
                input_shape_order=params.input_shape_order,
                aipp_config=params.aipp_config_path(version_dir),
                max_output_bytes=params.max_output_bytes,
                device_timing_period=params.effective_device_timing_period,
                label=args["model_name"],
                **images,
            )
        except Exception as exc:
            raise self._load_error(f"cannot load {om_path}: {exc}") from exc
        if self.session.runtime == "emulator" and not (
            params.acl_runtime or os.environ.get(ENV_VAR)
        ):
            logger.warning(
                "model %s: %s is an emulator .om, served on the CPU emulator (chosen by the "
                "file; set the parameter acl_runtime or $%s to choose explicitly)",
                self._name,
                om_path.name,
                ENV_VAR,
            )
        problems = compare_config_with_session(
            config, self.session.inputs, self.session.outputs, self.session.gears
        )
        if problems:
            self.session.close()
            raise self._load_error(
                f"config.pbtxt does not match {om_path.name}: " + "; ".join(problems)
            )
        gears = self.session.gears
        self._min_device_s = params.pipeline_min_device_s
        self._pipelining = params.pipeline_depth > 1 and self._min_device_s == 0
        depth_text = ""
        if self._pipelining:
            depth_text = " (pipelining every execution)"
        elif params.pipeline_depth > 1:
            depth_text = (
                f" (answering inline until executions take {self._min_device_s * 1e6:.0f} us on "
                "the device on average: pipeline_min_device_us)"
            )
        logger.info(
            "model %s instance %s: %s (sha256 %s) on device %d%s, runtime %s, %s gears %s, "
            "pipeline depth %d%s",
            self._name,
            args["model_instance_name"],
            om_path.name,
            sha256[:12] if sha256 else "not checked",
            device_id,
            f" in the device host (pid {self.session.host_pid})" if params.in_device_host else "",
            self.session.runtime,
            gears.kind,
            gears_text(gears, self.session.inputs),
            params.pipeline_depth,
            depth_text,
        )
        self._output_names = tuple(spec.name for spec in self.session.outputs)
        self._bytes_inputs = frozenset(
            spec.name for spec in self.session.inputs if spec.triton_dtype == "BYTES"
        )
        labels = {
            "model": args["model_name"],
            "version": args["model_version"],
            "device": str(device_id),
            "model_instance": args["model_instance_name"],
        }
        self._metrics = MetricsPublisher(
            pb_utils, labels, self.session.counters, self.session.device_memory()
        )
        self._completions: Completer[tuple[ServingBatch, list[tuple[ParsedRequest, Any]]]] | None
        self._completions = None
        self._measured = self.session.counters  # since the last pipelining decision
        self._long_intervals = 0  # metrics intervals in a row whose executions were long
        self._senders_refused = False  # the Python backend refused a response sender
        if params.pipeline_depth > 1:
            # Bounded: with the lanes, at most 2 * depth batches wait for their responses.
            self._completions = Completer("ge-completions", self._complete, params.pipeline_depth)

    def execute(self, requests: list[Any]) -> list[Any] | None:
        """Run the requests together (a bad one fails alone), answer every request.

        Depth 1 (and depth 2 while executions are short): returns the responses. Depth 2:
        returns `None` once the execution before this one has left the execute engine
        (`Session.wait_ready`); the responses go out through the requests' response senders
        when the batch completes.
        """
        senders = self._response_senders(requests) if self._pipelining else None
        inline = senders is None
        senders = senders or [None] * len(requests)
        responses: list[Any] = [None] * len(requests)
        accepted: list[ParsedRequest] = []
        for index, request in enumerate(requests):
            try:
                accepted.append(
                    parse_request(request, index, self._output_names, self._bytes_inputs)
                )
            except InputError as exc:
                responses[index] = self._invalid(exc)
        pending = self._submit(accepted, responses, pipelined=not inline)
        if inline:
            if pending is not None:
                for parsed, response in self._answers(pending, accepted):
                    responses[parsed.position] = response
        else:
            for sender, response in zip(senders, responses):
                if response is not None:
                    self._send(sender, response)
            if pending is not None:
                assert self._completions is not None
                batch = [(parsed, senders[parsed.position]) for parsed in accepted]
                self._completions.put((pending, batch))  # blocks while `depth` batches wait
            try:
                self.session.wait_ready()
            except Exception:  # the batches keep their own failures; this one is the device's
                logger.exception("model %s: waiting for the previous execution", self._name)
        if self._metrics.due():
            counters = self.session.counters
            if self._completions is not None and not self._senders_refused:
                self._decide_pipelining(counters)
            self._metrics.flush(counters, self.session.device_memory())
        return responses if inline else None

    def _response_senders(self, requests: list[Any]) -> list[Any] | None:
        """Each request's response sender; None when the Python backend gives response senders
        to decoupled models only (Triton 2.39's does; 2.44's and 2.51's give them to every
        model): the instance then answers every batch inline."""
        try:
            return [request.get_response_sender() for request in requests]
        except self._pb_utils.TritonModelException as exc:
            if "decoupled" not in str(exc):
                raise
            logger.warning(
                "model %s: this Triton's Python backend gives response senders to decoupled "
                "models only (%s); every batch is answered inline (no pipelining)",
                self._name,
                str(exc).splitlines()[0],
            )
            self._senders_refused = True
            self._pipelining = False
            return None

    def _submit(
        self, accepted: list[ParsedRequest], responses: list[Any], pipelined: bool
    ) -> ServingBatch | None:
        """Submit the accepted requests as one batch. One that does not fit the model
        (`InputError.request`) is answered INVALID_ARG and taken out of `accepted`, and the
        others are submitted again; any other failure answers them all INTERNAL (None: nothing
        runs)."""
        while accepted:
            try:
                return self.session.submit([p.feeds for p in accepted], pipelined=pipelined)
            except InputError as exc:
                assert exc.request is not None  # `submit` names the request
                responses[accepted.pop(exc.request).position] = self._invalid(exc)
            except ModelUnavailable as exc:  # its .om changed since it loaded (logged once)
                for parsed in accepted:
                    responses[parsed.position] = error_response(
                        self._pb_utils, str(exc), "UNAVAILABLE"
                    )
                return None
            except Exception as exc:  # not expected; never leave a request hanging
                logger.exception("model %s: submitting a batch", self._name)
                for parsed in accepted:
                    responses[parsed.position] = error_response(
                        self._pb_utils, str(exc), "INTERNAL"
                    )
                return None
        return None

    def _invalid(self, exc: InputError) -> Any:
        """The response failing a request that does not fit the model."""
        return error_response(self._pb_utils, str(exc), "INVALID_ARG")

    def _decide_pipelining(self, counters: SessionCounters) -> None:
        """From the executions since the last decision (none: no change): start pipelining when
        those of two intervals in a row took at least `pipeline_min_device_us` on the device on
        average (copies and execution; one interval may hold the first, slow executions of each
        gear, model_warmup's among them), stop when they took less than half of it (no flapping
        around the limit)."""
        before, self._measured = self._measured, counters
        executions = counters.executions - before.executions
        if executions <= 0:
            return
        device_s = (counters.device_seconds - before.device_seconds) / executions
        if self._pipelining:
            limit = self._min_device_s / 2
            pipelining = device_s >= limit
        else:
            limit = self._min_device_s
            self._long_intervals = self._long_intervals + 1 if device_s >= limit else 0
            pipelining = self._long_intervals >= 2
        if pipelining != self._pipelining:
            logger.info(
                "model %s: executions take %.0f us on the device on average, %s %.0f us; %s "
                "(pipeline_min_device_us)",
                self._name,
                device_s * 1e6,
                "at least" if pipelining else "less than",
                limit * 1e6,
                "pipelining them" if pipelining else "answering them inline",
            )
            self._pipelining = pipelining
            self._long_intervals = 0

    def _answers(
        self, pending: ServingBatch, accepted: list[ParsedRequest]
    ) -> list[tuple[ParsedRequest, Any]]:
        """Each accepted request with its response: its outputs, or the batch's failure."""
        pb_utils = self._pb_utils
        try:
            results = pending.result()
        except AclError as exc:  # the device failed it, in this process or the device host
            logger.warning(
                "model %s: a batch of %d request(s) failed with ACL error %d %s: %s",
                self._name,
                len(accepted),
                exc.code,
                exc.name,
                exc,
            )
            return [(parsed, error_response(pb_utils, str(exc), "INTERNAL")) for parsed in accepted]
        except GeBackendError as exc:  # e.g. the device host went away
            logger.warning(
                "model %s: a batch of %d request(s) failed: %s", self._name, len(accepted), exc
            )
            return [(parsed, error_response(pb_utils, str(exc), "INTERNAL")) for parsed in accepted]
        answers = []
        for parsed, outputs in zip(accepted, results):
            try:
                response = build_response(pb_utils, outputs, parsed.requested_outputs)
            except Exception as exc:  # e.g. an output Triton cannot wrap
                logger.exception(
                    "model %s: building the response of request %d", self._name, parsed.position
                )
                response = error_response(
                    pb_utils, f"building the response failed: {exc}", "INTERNAL"
                )
            answers.append((parsed, response))
        return answers

    def _send(self, sender: Any, response: Any) -> None:
        """Send a final response; a client that went away is logged, not raised."""
        try:
            sender.send(response, flags=self._pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as exc:
            logger.warning("model %s: sending a response failed: %s", self._name, exc)

    def _complete(self, item: tuple[ServingBatch, list[tuple[ParsedRequest, Any]]]) -> None:
        """Wait for a pipelined batch and send its responses (on the `Completer`'s thread).

        It never touches metrics (that crashes Triton 2.51): `execute` flushes them.
        """
        pending, batch = item
        senders = {parsed.position: sender for parsed, sender in batch}
        try:
            answers = self._answers(pending, [parsed for parsed, _ in batch])
        except Exception as exc:  # not expected; never leave a request hanging
            logger.exception("model %s: completing a batch", self._name)
            error = error_response(self._pb_utils, str(exc), "INTERNAL")
            answers = [(parsed, error) for parsed, _ in batch]
        for parsed, response in answers:
            self._send(senders[parsed.position], response)

    def _load_error(self, message: str) -> Exception:
        logger.error("model %s: %s", self._name, message)
        return self._pb_utils.TritonModelException(f"model {self._name}: {message}")

    def close(self) -> None:
        """Answer the batches in flight, then release the session (Triton calls finalize once)."""
        if self._completions is not None:
            self._completions.close()
        self._metrics.close()
        self.session.close()
        logger.info("model %s: instance closed", self._name)
