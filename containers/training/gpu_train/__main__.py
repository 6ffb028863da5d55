"""``python -m gpu_train train``: the container's entry point (SageMaker runs ``docker run IMAGE train``)."""

from gpu_train.entrypoint import main

raise SystemExit(main())
