"""The default code of every job: the platform's built-in trainer (shard loader, DDP, AMP, checkpoints).

``python -m gpu_train launch --entry-point train.py`` runs this file from the ``code`` channel like any
other script, as one plain process or under torchrun. The trainer reads the SageMaker contract itself
(hyperparameters, channels, ``/opt/ml/model``) and ignores its command-line arguments; see
containers/training/README.md for its hyperparameters and model artifact.
"""

from gpu_train.worker import main

raise SystemExit(main())
