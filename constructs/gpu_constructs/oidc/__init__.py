"""GitOps deploy roles trusted through OIDC providers (GitHub Actions, GitLab, ...), and the provider facts.

The names of the construct module (``gpu_constructs.oidc.construct``) are importable from the
package, as they were from the module it was before; they load the CDK on first use.
"""

from __future__ import annotations

from gpu_constructs.lazy import lazy_exports

__all__ = [
    "CDK_BOOTSTRAP_ROLES",
    "DEFAULT_CDK_QUALIFIER",
    "STACK_ID_WILDCARD_REASON",
    "GitOpsDeployRole",
    "Issuer",
    "Mode",
    "existing_oidc_provider",
]

#: Every public name of the construct module stays importable from here; ``__all__`` is the documented API.
_EXPORTS = {
    name: "gpu_constructs.oidc.construct"
    for name in [
        *__all__,
    ]
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
