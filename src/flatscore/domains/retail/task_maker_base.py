"""What every retail task kind shares: the draft it returns, picking and identifying, validation.

A task kind (see :mod:`.write_tasks` and :mod:`.info_tasks`) draws a :class:`_Draft`; this
module turns a draft into a tau2-format task only after replaying its ground-truth actions
through :class:`RetailTools` on a fresh copy of the database: a replay that raises, a write
that changes nothing, or a communicate string absent from the results drops the draft.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Callable

from ..toolkit import ToolError, render_result
from .catalogue import PERSONAS
from .data_model import CreditCard, GiftCard, Order, OrderItem, Paypal, RetailDB, User, UserAddress, Variant
from .db_builder import _address
from .tools import RetailTools

#: How a task tells the user their identifying details and order ids: ``prose`` ("You are Liam
#: Wilson, and your zip code is 02125."), or ``json``: the identifying call's arguments and the
#: order id as the call writes them ('Your details: {"first_name": "Liam", ...}.'), so that a call's
#: arguments are a verbatim copy of the user's words, the copy a tiny model does well.
USER_DETAIL_FORMS = ("prose", "json")


@dataclass
class _Draft:
    kind: str
    reason: str
    known: list[str]
    unknown: str
    actions: list[tuple[str, dict[str, Any]]]
    #: computes the communicate_info strings from the replayed results; each must then occur
    #: verbatim in a rendered result, or the draft is dropped
    communicate: Callable[[list[Any]], list[str]] | None = None
    purpose: str = ""


def _describe_method(method: Any) -> str:
    if isinstance(method, CreditCard):
        return f"your {method.brand} credit card ending in {method.last_four}"
    if isinstance(method, Paypal):
        return "your PayPal account"
    return "your gift card"


def _options_text(options: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in options.items())


def _num(value: float) -> str:
    """A number as it appears in a rendered tool result (JSON float form)."""
    return json.dumps(value)


class TaskMakerBase:
    """State and helpers of the task maker; the task kinds themselves live in subclasses."""

    def __init__(self, rng: random.Random, db: RetailDB, user_details: str = "prose") -> None:
        if user_details not in USER_DETAIL_FORMS:
            raise ValueError(f"user_details: expected one of {list(USER_DETAIL_FORMS)}, got {user_details!r}")
        self.rng = rng
        self.db = db
        self.user_details = user_details
        self.plain = db.model_dump()
        self.used: set[tuple[str, str]] = set()

    # -- helpers -----------------------------------------------------------------------------
    def _identify(self, user: User) -> tuple[list[str], str, tuple[str, dict[str, Any]]]:
        if self.rng.random() < 0.5:
            by_email = {"email": user.email}
            said = f"Your email is {user.email}."
            return (
                [self._details(by_email, said)],
                "You do not remember your user id.",
                ("find_user_id_by_email", by_email),
            )
        by_name = {"first_name": user.name.first_name, "last_name": user.name.last_name, "zip": user.address.zip}
        said = f"You are {user.name.first_name} {user.name.last_name}, and your zip code is {user.address.zip}."
        return (
            [self._details(by_name, said)],
            "You do not remember your email address.",
            ("find_user_id_by_name_zip", by_name),
        )

    def _details(self, arguments: dict[str, str], prose: str) -> str:
        """The user's identifying details: ``prose``, or (json) the call's arguments as it writes them."""
        return prose if self.user_details == "prose" else f"Your details: {json.dumps(arguments)}."

    def _order_fact(self, *order_ids: str) -> str:
        """The order ids the user knows, in the task's form of details."""
        if self.user_details == "json":
            forms = ", ".join(json.dumps({"order_id": order_id}) for order_id in order_ids)
            return f"The order{'s' if len(order_ids) > 1 else ''}: {forms}."
        if len(order_ids) == 1:
            return f"The order id is {order_ids[0]}."
        return f"The order ids are {', '.join(order_ids[:-1])} and {order_ids[-1]}."

    def _orders_with(self, kind: str, predicate: Callable[[Order], bool]) -> list[Order]:
        found = [o for o in self.db.orders.values() if predicate(o) and (kind, o.order_id) not in self.used]
        return found

    def _pick_order(self, kind: str, predicate: Callable[[Order], bool]) -> Order | None:
        candidates = self._orders_with(kind, predicate)
        if not candidates:
            candidates = [o for o in self.db.orders.values() if predicate(o)]
        if not candidates:
            return None
        order = self.rng.choice(candidates)
        self.used.add((kind, order.order_id))
        return order

    def _alternatives(self, item: OrderItem) -> list[Variant]:
        product = self.db.products[item.product_id]
        return [v for v in product.variants.values() if v.available and v.item_id != item.item_id]

    def _payment_for(self, user: User, diff: float) -> tuple[str, Any] | None:
        ok = [(pid, m) for pid, m in user.payment_methods.items() if not isinstance(m, GiftCard) or m.balance >= diff]
        return self.rng.choice(ok) if ok else None

    def _new_address(self, old: UserAddress) -> UserAddress:
        while True:
            address = _address(self.rng)
            if address != old:
                return address

    @staticmethod
    def _address_args(address: UserAddress) -> dict[str, str]:
        return {
            "address1": address.address1,
            "address2": address.address2,
            "city": address.city,
            "state": address.state,
            "country": address.country,
            "zip": address.zip,
        }

    @staticmethod
    def _address_text(address: UserAddress) -> str:
        line2 = f", {address.address2}" if address.address2 else ""
        return f"{address.address1}{line2}, {address.city}, {address.state} {address.zip}, {address.country}"

    def _swap_plan(self, order: Order, n: int) -> tuple[list[OrderItem], list[Variant]] | None:
        swappable = [item for item in order.items if self._alternatives(item)]
        if not swappable:
            return None
        chosen = self.rng.sample(swappable, k=min(n, len(swappable)))
        targets = [self.rng.choice(self._alternatives(item)) for item in chosen]
        return chosen, targets

    # -- validation ----------------------------------------------------------------------------
    def replay(self, draft: _Draft) -> list[Any] | None:
        """Replay on a fresh DB; None when a call fails or a write changes nothing."""
        tools = RetailTools(RetailDB.model_validate(self.plain))
        results = []
        for name, arguments in draft.actions:
            before = tools.db.model_dump_json() if tools.specs[name].mutates else None
            try:
                results.append(tools.call(name, arguments))
            except ToolError:
                return None
            if before is not None and tools.db.model_dump_json() == before:
                return None
        return results

    def make(self, kind: str, task_id: str) -> dict[str, Any] | None:
        draft: _Draft | None = getattr(self, kind)()
        if draft is None:
            return None
        results = self.replay(draft)
        if results is None:
            return None
        communicate: list[str] = []
        if draft.communicate is not None:
            communicate = draft.communicate(results)
            rendered = [render_result(r) for r in results]
            if not all(any(s in text for text in rendered) for s in communicate):
                return None
        actions = [
            {"action_id": f"{task_id}_{i}", "requestor": "assistant", "name": name, "arguments": args, "info": None}
            for i, (name, args) in enumerate(draft.actions)
        ]
        return {
            "id": task_id,
            "description": {"purpose": draft.purpose, "relevant_policies": None, "notes": f"kind: {draft.kind}"},
            "user_scenario": {
                "persona": None,
                "instructions": {
                    "domain": "retail",
                    "reason_for_call": draft.reason,
                    "known_info": " ".join(draft.known),
                    "unknown_info": draft.unknown,
                    "task_instructions": self.rng.choice(PERSONAS),
                },
            },
            "initial_state": None,
            "evaluation_criteria": {
                "actions": actions,
                "communicate_info": communicate,
                "nl_assertions": None,
                "reward_basis": ["DB", "COMMUNICATE"] if communicate else ["DB"],
            },
        }
