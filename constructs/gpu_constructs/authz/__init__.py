"""Authorization of the platform's journeys: every AWS request a runtime makes, evaluated against the policies the
app synthesizes (identity policies of the principal and the resource's own policy).

* :mod:`~gpu_constructs.authz.policy`: IAM policy evaluation (one request, its policies);
* :mod:`~gpu_constructs.authz.assembly`: a cloud assembly's templates as one account (names, ARNs, policies);
* :mod:`~gpu_constructs.authz.journeys`: the requests a SageMaker job (or whoever starts it) makes.
"""

from gpu_constructs.authz.assembly import Assembly, UnresolvableValue
from gpu_constructs.authz.journeys import Denied, check_requests, job_requests, start_job_requests
from gpu_constructs.authz.policy import AuthRequest, Decision, PolicySet, UnsupportedPolicy, evaluate

#: The documented API: what ``platform_tools.authorization`` and the README use, the results they return and the
#: errors they raise (``check_requests`` raises ``UnresolvableValue`` unless given ``on_unknown``).
__all__ = [
    "Assembly",
    "AuthRequest",
    "Decision",
    "Denied",
    "PolicySet",
    "UnresolvableValue",
    "UnsupportedPolicy",
    "check_requests",
    "evaluate",
    "job_requests",
    "start_job_requests",
]
