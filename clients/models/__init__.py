"""Model providers behind one small interface: `Model.request(messages, settings) -> ModelResponse`.

Pick one with `get_model(spec)`; wrap it with `with_retries` and `MeteredModel` (ledger + budget).
Provider adapters (gemini, openai_compat) are imported lazily by the registry.
"""

from maxkernel.clients.models.base import (
    Message,
    Model,
    ModelConfigError,
    ModelError,
    ModelResponse,
    ModelSettings,
    Role,
    TransientModelError,
    Usage,
)
from maxkernel.clients.models.fake import FunctionModel, QueueExhausted, QueueModel
from maxkernel.clients.models.ledger import Budget, BudgetExceeded, Ledger, LedgerEntry, MeteredModel
from maxkernel.clients.models.pricing import PRICES, PRICES_AS_OF, Price, cost_usd
from maxkernel.clients.models.registry import DEFAULT_GEMINI_MODEL, default_model_spec, get_model
from maxkernel.clients.models.retry import RetryingModel, with_retries

__all__ = [
    "DEFAULT_GEMINI_MODEL",
    "PRICES",
    "PRICES_AS_OF",
    "Budget",
    "BudgetExceeded",
    "FunctionModel",
    "Ledger",
    "LedgerEntry",
    "Message",
    "MeteredModel",
    "Model",
    "ModelConfigError",
    "ModelError",
    "ModelResponse",
    "ModelSettings",
    "Price",
    "QueueExhausted",
    "QueueModel",
    "RetryingModel",
    "Role",
    "TransientModelError",
    "Usage",
    "cost_usd",
    "default_model_spec",
    "get_model",
    "with_retries",
]
