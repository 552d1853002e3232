"""Retail task kinds that change the database: cancel, modify, exchange, return, re-address.

Each method draws one :class:`_Draft` whose ground truth ends in a mutating tool call, or
returns None when the database offers no suitable order.
"""

from __future__ import annotations

from typing import Any

from .data_model import GiftCard, Order
from .task_maker_base import TaskMakerBase, _describe_method, _Draft, _options_text


class WriteTaskKinds(TaskMakerBase):
    """Task kinds whose ground truth writes to the database."""

    def cancel(self) -> _Draft | None:
        order = self._pick_order("cancel", lambda o: o.status == "pending")
        if order is None:
            return None
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        reason = self.rng.choice(["no longer needed", "ordered by mistake"])
        why = "you no longer need it" if reason == "no longer needed" else "you ordered it by mistake"
        names = " and ".join(item.name for item in order.items)
        return _Draft(
            kind="cancel_pending_order",
            reason=f"You want to cancel your order {order.order_id} ({names}) because {why}.",
            known=known + [self._order_fact(order.order_id)],
            unknown=unknown,
            actions=[
                ident,
                ("get_order_details", {"order_id": order.order_id}),
                ("cancel_pending_order", {"order_id": order.order_id, "reason": reason}),
            ],
            purpose="Cancel a pending order with a valid reason.",
        )

    def modify_order_address(self) -> _Draft | None:
        order = self._pick_order("order_address", lambda o: "pending" in o.status)
        if order is None:
            return None
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        new = self._new_address(order.address)
        return _Draft(
            kind="modify_pending_order_address",
            reason=f"Your order {order.order_id} has not shipped yet and you want it delivered to a different address.",
            known=known + [self._order_fact(order.order_id), f"The new shipping address is {self._address_text(new)}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_order_details", {"order_id": order.order_id}),
                ("modify_pending_order_address", {"order_id": order.order_id, **self._address_args(new)}),
            ],
            purpose="Change the shipping address of a pending order.",
        )

    def _swap_draft(self, kind: str, order: Order, tool: str, verb: str) -> _Draft | None:
        plan = self._swap_plan(order, self.rng.choice([1, 1, 2]))
        if plan is None:
            return None
        items, targets = plan
        user = self.db.users[order.user_id]
        diff = round(sum(t.price - i.price for i, t in zip(items, targets)), 2)
        payment = self._payment_for(user, diff)
        if payment is None:
            return None
        pid, method = payment
        known, unknown, ident = self._identify(user)
        wants = [
            f"the {i.name} ({_options_text(i.options)}) for the one with {_options_text(t.options)}"
            for i, t in zip(items, targets)
        ]
        actions: list[tuple[str, dict[str, Any]]] = [
            ident,
            ("get_user_details", {"user_id": user.user_id}),
            ("get_order_details", {"order_id": order.order_id}),
        ]
        for item in items:
            actions.append(("get_product_details", {"product_id": item.product_id}))
        actions.append(
            (
                tool,
                {
                    "order_id": order.order_id,
                    "item_ids": [i.item_id for i in items],
                    "new_item_ids": [t.item_id for t in targets],
                    "payment_method_id": pid,
                },
            )
        )
        return _Draft(
            kind=tool,
            reason=f"For your order {order.order_id} you want to {verb} " + "; and ".join(wants) + ".",
            known=known
            + [
                self._order_fact(order.order_id),
                f"Any price difference should go through {_describe_method(method)}.",
            ],
            unknown=unknown,
            actions=actions,
            purpose=f"{verb.capitalize()} items of an order for other variants of the same product.",
        )

    def modify_items(self) -> _Draft | None:
        order = self._pick_order("items", lambda o: o.status == "pending")
        return None if order is None else self._swap_draft("items", order, "modify_pending_order_items", "change")

    def exchange(self) -> _Draft | None:
        order = self._pick_order("exchange", lambda o: o.status == "delivered")
        return (
            None if order is None else self._swap_draft("exchange", order, "exchange_delivered_order_items", "exchange")
        )

    def return_items(self) -> _Draft | None:
        order = self._pick_order("return", lambda o: o.status == "delivered")
        if order is None:
            return None
        user = self.db.users[order.user_id]
        items = self.rng.sample(order.items, k=self.rng.randint(1, len(order.items)))
        original = order.payment_history[0].payment_method_id
        options = [original] + [
            pid for pid, m in user.payment_methods.items() if isinstance(m, GiftCard) and pid != original
        ]
        pid = self.rng.choice(options)
        where = "the original payment method" if pid == original else _describe_method(user.payment_methods[pid])
        known, unknown, ident = self._identify(user)
        names = ", ".join(f"the {i.name} ({_options_text(i.options)})" for i in items)
        return _Draft(
            kind="return_delivered_order_items",
            reason=f"You received your order {order.order_id} and want to return {names}.",
            known=known + [self._order_fact(order.order_id), f"You want the refund to go to {where}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_user_details", {"user_id": user.user_id}),
                ("get_order_details", {"order_id": order.order_id}),
                (
                    "return_delivered_order_items",
                    {"order_id": order.order_id, "item_ids": [i.item_id for i in items], "payment_method_id": pid},
                ),
            ],
            purpose="Return items of a delivered order to an allowed refund method.",
        )

    def modify_payment(self) -> _Draft | None:
        def ok(o: Order) -> bool:
            if "pending" not in o.status or len(o.payment_history) != 1:
                return False
            user = self.db.users[o.user_id]
            return any(
                pid != o.payment_history[0].payment_method_id
                and (not isinstance(m, GiftCard) or m.balance >= o.payment_history[0].amount)
                for pid, m in user.payment_methods.items()
            )

        order = self._pick_order("payment", ok)
        if order is None:
            return None
        user = self.db.users[order.user_id]
        amount = order.payment_history[0].amount
        current = order.payment_history[0].payment_method_id
        choices = [
            pid
            for pid, m in user.payment_methods.items()
            if pid != current and (not isinstance(m, GiftCard) or m.balance >= amount)
        ]
        pid = self.rng.choice(choices)
        known, unknown, ident = self._identify(user)
        return _Draft(
            kind="modify_pending_order_payment",
            reason=f"You want to pay for your pending order {order.order_id} with {_describe_method(user.payment_methods[pid])} instead.",
            known=known + [self._order_fact(order.order_id)],
            unknown=unknown,
            actions=[
                ident,
                ("get_user_details", {"user_id": user.user_id}),
                ("get_order_details", {"order_id": order.order_id}),
                ("modify_pending_order_payment", {"order_id": order.order_id, "payment_method_id": pid}),
            ],
            purpose="Switch the payment method of a pending order.",
        )

    def modify_user_address(self) -> _Draft | None:
        user = self.rng.choice(list(self.db.users.values()))
        known, unknown, ident = self._identify(user)
        new = self._new_address(user.address)
        return _Draft(
            kind="modify_user_address",
            reason="You moved and want to update the default address on your account.",
            known=known + [f"Your new address is {self._address_text(new)}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_user_details", {"user_id": user.user_id}),
                ("modify_user_address", {"user_id": user.user_id, **self._address_args(new)}),
            ],
            purpose="Update a user's default address.",
        )

    def address_everywhere(self) -> _Draft | None:
        """Two writes: the default address and a pending order's address."""
        order = self._pick_order("address_both", lambda o: "pending" in o.status)
        if order is None:
            return None
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        new = self._new_address(user.address)
        if new == order.address:
            return None
        return _Draft(
            kind="modify_user_and_order_address",
            reason=f"You moved. You want to update your default address and also have your pending order {order.order_id} shipped to the new address.",
            known=known + [self._order_fact(order.order_id), f"Your new address is {self._address_text(new)}."],
            unknown=unknown,
            actions=[
                ident,
                ("get_user_details", {"user_id": user.user_id}),
                ("modify_user_address", {"user_id": user.user_id, **self._address_args(new)}),
                ("get_order_details", {"order_id": order.order_id}),
                ("modify_pending_order_address", {"order_id": order.order_id, **self._address_args(new)}),
            ],
            purpose="Update the default address and a pending order's address.",
        )
