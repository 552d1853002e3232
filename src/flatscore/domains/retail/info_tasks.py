"""Retail task kinds that only read: look-ups and calculations the agent must communicate.

Each method draws one :class:`_Draft` with a ``communicate`` function, or returns None when
the database offers no suitable order or user.
"""

from __future__ import annotations

from .task_maker_base import TaskMakerBase, _Draft, _num, _options_text


class InfoTaskKinds(TaskMakerBase):
    """Task kinds whose ground truth reads only and whose answer the agent must say."""

    def order_total(self) -> _Draft | None:
        order = self._pick_order("total", lambda o: o.status != "cancelled")
        if order is None:
            return None
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        amount = order.payment_history[0].amount
        return _Draft(
            kind="info_order_total",
            reason=f"You want to know how much you paid in total for your order {order.order_id}. You do not want to change anything.",
            known=known + [self._order_fact(order.order_id)],
            unknown=unknown,
            actions=[ident, ("get_order_details", {"order_id": order.order_id})],
            communicate=lambda results: [_num(amount)],
            purpose="Look up and communicate an order's total.",
        )

    def item_price(self) -> _Draft | None:
        user = self.rng.choice(list(self.db.users.values()))
        product = self.rng.choice(list(self.db.products.values()))
        variant = self.rng.choice(list(product.variants.values()))
        known, unknown, ident = self._identify(user)
        return _Draft(
            kind="info_item_price",
            reason=(
                f"You are thinking of buying a {product.name} with {_options_text(variant.options)} "
                "and want to know its price and whether it is in stock. You do not want to buy it now."
            ),
            known=known,
            unknown=unknown + " You do not know the product id.",
            actions=[
                ident,
                ("list_all_product_types", {}),
                ("get_product_details", {"product_id": product.product_id}),
            ],
            communicate=lambda results: [_num(variant.price)],
            purpose="Find a product by name and communicate a variant's price.",
        )

    def tracking(self) -> _Draft | None:
        order = self._pick_order("tracking", lambda o: o.status in ("processed", "delivered") and bool(o.fulfillments))
        if order is None:
            return None
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        tracking = order.fulfillments[0].tracking_id[0]
        return _Draft(
            kind="info_tracking",
            reason=f"You want the tracking number of your order {order.order_id}.",
            known=known + [self._order_fact(order.order_id)],
            unknown=unknown,
            actions=[ident, ("get_order_details", {"order_id": order.order_id})],
            communicate=lambda results: [tracking],
            purpose="Look up and communicate a tracking number.",
        )

    def sum_of_orders(self) -> _Draft | None:
        candidates = [u for u in self.db.users.values() if len(u.orders) >= 2]
        if not candidates:
            return None
        user = self.rng.choice(candidates)
        first, second = self.rng.sample(user.orders, k=2)
        a = self.db.orders[first].payment_history[0].amount
        b = self.db.orders[second].payment_history[0].amount
        known, unknown, ident = self._identify(user)
        return _Draft(
            kind="calculate_total",
            reason=f"You want to know how much your orders {first} and {second} cost together. You do not want to change anything.",
            known=known + [self._order_fact(first, second)],
            unknown=unknown,
            actions=[
                ident,
                ("get_order_details", {"order_id": first}),
                ("get_order_details", {"order_id": second}),
                ("calculate", {"expression": f"{_num(a)} + {_num(b)}"}),
            ],
            communicate=lambda results: [results[-1]],
            purpose="Add two order totals with calculate and communicate the sum.",
        )

    def exchange_difference(self) -> _Draft | None:
        """Price difference of a hypothetical exchange: two look-ups and a calculate step."""
        order = self._pick_order("difference", lambda o: o.status == "delivered")
        if order is None:
            return None
        plan = self._swap_plan(order, 1)
        if plan is None:
            return None
        (item,), (target,) = plan
        user = self.db.users[order.user_id]
        known, unknown, ident = self._identify(user)
        return _Draft(
            kind="calculate_price_difference",
            reason=(
                f"In your order {order.order_id} you bought a {item.name} ({_options_text(item.options)}). Before deciding on an "
                f"exchange, you want to know how much more (or less) the one with {_options_text(target.options)} costs. "
                "You do not want to exchange anything yet."
            ),
            known=known + [self._order_fact(order.order_id)],
            unknown=unknown,
            actions=[
                ident,
                ("get_order_details", {"order_id": order.order_id}),
                ("get_product_details", {"product_id": item.product_id}),
                ("calculate", {"expression": f"{_num(target.price)} - {_num(item.price)}"}),
            ],
            communicate=lambda results: [results[-1]],
            purpose="Compute a price difference with calculate and communicate it.",
        )
