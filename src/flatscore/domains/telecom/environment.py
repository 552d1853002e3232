"""The telecom environment: both toolkits plus tau2's cross-side wiring after every call."""

from __future__ import annotations

from ..environment import Environment
from ..toolkit import ToolError
from .data_model import LineStatus
from .tools import TelecomTools
from .user_data_model import PaymentRequest
from .user_tools import TelecomUserTools


class ScenarioError(ValueError):
    """The user's phone number names no line, or the line's plan is missing: a broken task."""


class TelecomEnvironment(Environment):
    agent_toolkit: TelecomTools
    user_toolkit: TelecomUserTools

    def __init__(self, agent_toolkit: TelecomTools, user_toolkit: TelecomUserTools, policy: str) -> None:
        super().__init__("telecom", agent_toolkit, user_toolkit, policy)

    def sync(self) -> None:
        """Carry the carrier side's state over to the user's surroundings (tau2's ``sync_tools``).

        The user's line being active, roaming being allowed on it, its data allowance being
        used up, and the bill awaiting payment become facts of the user's world; a payment
        the user made marks the bill paid.
        """
        tools, surroundings = self.agent_toolkit, self.user_toolkit.db.surroundings
        phone = surroundings.phone_number
        if phone is None:
            return
        try:
            line = tools._line_by_phone(phone)
            plan = tools._plan(line.plan_id)
        except ToolError as exc:
            raise ScenarioError(f"telecom scenario: {exc} (user phone number {phone})") from exc
        surroundings.line_active = line.status == LineStatus.ACTIVE
        surroundings.roaming_allowed = line.roaming_enabled
        surroundings.mobile_data_usage_exceeded = line.data_used_gb >= plan.data_limit_gb + line.data_refueling_gb

        request = surroundings.payment_request
        if request is not None and request.paid:
            tools._set_bill_to_paid(request.bill_id)
            surroundings.payment_request = None
        if surroundings.payment_request is None:
            customer = tools.get_customer_by_phone(phone)
            awaiting = tools._bills_awaiting_payment(customer)
            if awaiting:
                surroundings.payment_request = PaymentRequest(
                    bill_id=awaiting[0].bill_id, amount_due=awaiting[0].total_due
                )
