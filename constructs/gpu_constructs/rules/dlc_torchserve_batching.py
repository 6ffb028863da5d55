"""TorchServe batching above 1 on the AWS PyTorch inference DLC fails whole batches for one bad request.

The PyTorch inference DLCs (``<DLC account>.dkr.ecr.<region>.amazonaws.com/pytorch-inference:<tag>``) serve
with TorchServe through the SageMaker toolkits. ``SAGEMAKER_TS_BATCH_SIZE`` (and ``SAGEMAKER_TS_MAX_BATCH_DELAY``)
become TorchServe's ``batchSize``/``maxBatchDelay`` (sagemaker-pytorch-inference 2.0.25,
``sagemaker_pytorch_serving_container/ts_parameters.py``: ``MODEL_SERVER_BATCH_SIZE = "SAGEMAKER_TS_BATCH_SIZE"``;
``torchserve.py`` ``_generate_ts_config_properties`` writes ``"batchSize": {ts_env._batch_size}``; default
``DEFAULT_TS_BATCH_SIZE = 1`` in ``ts_environment.py``). The handler that then receives the batch is
``sagemaker_pytorch_serving_container.handler_service.HandlerService``, a ``DefaultHandlerService`` around
``sagemaker_inference.transformer.Transformer``, whose ``transform(self, data, context)`` (sagemaker-inference
1.10.1, ``src/sagemaker_inference/transformer.py``; the copy vendored in sagemaker-pytorch-inference 2.0.25 is
the same code plus one log line) does::

    try:
        ...
        for i in range(len(data)):
            input_data = data[i].get("body")
            request_processor = context.request_processor[0]
            request_property = request_processor.get_request_properties()
            content_type = utils.retrieve_content_type_header(request_property)
            ...
            result = self._run_handler_function(
                self._transform_fn, *(self._model, input_data, content_type, accept)
            )
            ...
            context.set_response_content_type(0, response_content_type)
            response_list.append(response)
        return response_list
    except Exception as e:  # pylint: disable=broad-except
        ...
            return self.handle_error(
                context,
                GenericInferenceToolkitError(http_client.INTERNAL_SERVER_ERROR, str(e)),
                trace,
            )

and ``handle_error`` returns ``["{}\\n{}".format(inference_exception.message, trace)]``. So with a batch of N:

* every request is decoded with request 0's ``Content-Type`` and ``Accept`` (``request_processor[0]``);
* ``_default_transform_fn`` runs ``input_fn``/``predict_fn``/``output_fn`` once per request: no batched
  forward pass, so batching only adds queueing delay;
* any error returns a one-element list, and TorchServe (``ts/service.py`` ``Service.predict``, torchserve 0.12.0)
  answers ``if len(ret) != len(input_batch): ... create_predict_response(None, req_id_map, "number of batch
  response mismatched", 503)`` for every request of the batch: one malformed request fails its neighbours.

``tests/containers/inference/test_dlc_toolkit_batching.py`` feeds such a batch through the real toolkit code.

Non-compliant: an ``AWS::SageMaker::Model`` container whose ``Image`` is a PyTorch inference DLC URI with a
literal ``SAGEMAKER_TS_BATCH_SIZE`` above 1 (one finding per container: ``PrimaryContainer`` or
``Containers.<i>``). Compliant: batch size 1 or unset, or another image (the platform's own inference image,
gpu_serve, batches with per-request decoding and failure isolation). An image URI or batch size held in a
parameter is not applicable.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpu_constructs.dlc import TORCHSERVE_BATCH_SIZE_ENV, TORCHSERVE_SAFE_BATCH_SIZE, is_pytorch_inference_dlc
from gpu_constructs.rules._rule import NOT_APPLICABLE, Resource, Result, flatten, literal, rule


def _containers(properties: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    found: list[tuple[str, Mapping[str, Any]]] = []
    primary = properties.get("PrimaryContainer")
    if isinstance(primary, Mapping):
        found.append(("PrimaryContainer", primary))
    containers = properties.get("Containers")
    if isinstance(containers, list):
        found += [(f"Containers.{i}", c) for i, c in enumerate(containers) if isinstance(c, Mapping)]
    return found


def _batch_size(container: Mapping[str, Any]) -> int | None:
    environment = container.get("Environment")
    if not isinstance(environment, Mapping):
        return None
    value = environment.get(TORCHSERVE_BATCH_SIZE_ENV)
    text = literal(value) if not isinstance(value, int) else str(value)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


@rule(
    id="DlcTorchServeBatching",
    resource_types=("AWS::SageMaker::Model",),
    info="SAGEMAKER_TS_BATCH_SIZE > 1 on the PyTorch inference DLC: its TorchServe handler decodes a batch with "
    "request 0's content type, runs predict_fn per request and fails the whole batch on one bad request. Use 1, "
    "or the platform's inference image (gpu_serve) to batch.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    findings: list[str] = []
    applicable = False
    for where, container in _containers(resource.properties):
        if not is_pytorch_inference_dlc(flatten(container.get("Image"))):
            continue
        size = _batch_size(container)
        if size is None:
            continue
        applicable = True
        if size > TORCHSERVE_SAFE_BATCH_SIZE:
            findings.append(f"{where}:{TORCHSERVE_BATCH_SIZE_ENV}={size}")
    return findings if applicable else NOT_APPLICABLE
