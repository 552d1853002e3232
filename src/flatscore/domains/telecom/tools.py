"""The agent's telecom tools (tau2-bench's ``TelecomTools``: same names, arguments, semantics).

Besides the tools, the class carries tau2's non-tool environment functions (task set-up such
as ``set_data_usage`` and ``suspend_line_for_overdue_bill``, and the ``assert_*`` checks);
they are plain public methods, reachable through ``Environment.run_env_function`` only.
"""

from __future__ import annotations

import datetime
import unicodedata
from typing import Any

from ..toolkit import ToolError, Toolkit, tool
from .data_model import (
    TODAY,
    Bill,
    BillStatus,
    Customer,
    Device,
    Line,
    LineItem,
    LineStatus,
    Plan,
    TelecomDB,
)


def _fold(name: str) -> str:
    """Case- and accent-insensitive form of a name."""
    decomposed = unicodedata.normalize("NFKD", name)
    return " ".join("".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold().split())


def _digits(phone_number: str) -> str:
    return "".join(ch for ch in phone_number if ch.isdigit())


def _first_of_next_month(day: datetime.date) -> datetime.date:
    return (day.replace(day=1) + datetime.timedelta(days=32)).replace(day=1)


class TelecomTools(Toolkit):
    """Customer, line, billing and usage operations over a :class:`TelecomDB`."""

    side = "assistant"
    db: TelecomDB

    # -- lookups (helpers, not tools) -------------------------------------------------------
    def _line_by_phone(self, phone_number: str) -> Line:
        wanted = _digits(phone_number)
        for alias, canonical in self.db.phone_number_aliases.items():
            if _digits(alias) == wanted:
                wanted = _digits(canonical)
                break
        for line in self.db.lines:
            if wanted and _digits(line.phone_number) == wanted:
                return line
        raise ToolError(f"Line with phone number {phone_number} not found")

    def _line(self, line_id: str) -> Line:
        for line in self.db.lines:
            if line.line_id == line_id:
                return line
        raise ToolError(f"Line with ID {line_id} not found")

    def _plan(self, plan_id: str) -> Plan:
        for plan in self.db.plans:
            if plan.plan_id == plan_id:
                return plan
        raise ToolError(f"Plan with ID {plan_id} not found")

    def _device(self, device_id: str) -> Device:
        for device in self.db.devices:
            if device.device_id == device_id:
                return device
        raise ToolError(f"Device with ID {device_id} not found")

    def _bill(self, bill_id: str) -> Bill:
        for bill in self.db.bills:
            if bill.bill_id == bill_id:
                return bill
        raise ToolError(f"Bill with ID {bill_id} not found")

    def _customer(self, customer_id: str) -> Customer:
        for customer in self.db.customers:
            if customer.customer_id == customer_id:
                return customer
        raise ToolError(f"Customer with ID {customer_id} not found")

    def _customer_line(self, customer_id: str, line_id: str) -> Line:
        customer = self._customer(customer_id)
        if line_id not in customer.line_ids:
            raise ToolError(f"Line {line_id} not found for customer {customer_id}")
        return self._line(line_id)

    def _bills_awaiting_payment(self, customer: Customer) -> list[Bill]:
        return [b for b in (self._bill(i) for i in customer.bill_ids) if b.status == BillStatus.AWAITING_PAYMENT]

    def _set_bill_to_paid(self, bill_id: str) -> None:
        self._bill(bill_id).status = BillStatus.PAID

    def _new_bill_id(self, customer_id: str) -> str:
        # tau2 draws a random id here; a counter keeps episodes reproducible.
        taken = {bill.bill_id for bill in self.db.bills}
        n = len(self.db.bills) + 1
        while f"B{customer_id.lstrip('C')}{n:03d}" in taken:
            n += 1
        return f"B{customer_id.lstrip('C')}{n:03d}"

    def _apply_one_time_charge(self, customer_id: str, amount: float, description: str) -> None:
        """Add a charge (or credit) to the customer's draft bill, opening one if needed."""
        customer = self._customer(customer_id)
        draft = next(
            (b for b in (self._bill(i) for i in customer.bill_ids) if b.status == BillStatus.DRAFT),
            None,
        )
        if draft is None:
            start = _first_of_next_month(TODAY)
            draft = Bill(
                bill_id=self._new_bill_id(customer_id),
                customer_id=customer_id,
                period_start=start,
                period_end=_first_of_next_month(start) - datetime.timedelta(days=1),
                issue_date=start,
                total_due=0.0,
                due_date=start + datetime.timedelta(days=14),
                status=BillStatus.DRAFT,
            )
            self.db.bills.append(draft)
            customer.bill_ids.append(draft.bill_id)
        draft.line_items.append(
            LineItem(description=description, amount=amount, date=TODAY, item_type="Credit" if amount < 0 else "Charge")
        )
        draft.total_due += amount

    # -- customer lookup -------------------------------------------------------------------
    @tool
    def get_customer_by_phone(self, phone_number: str) -> Customer:
        """Find the customer whose contact number or one of whose lines has this phone number."""
        wanted = _digits(phone_number)
        if wanted:
            for customer in self.db.customers:
                if _digits(customer.phone_number) == wanted:
                    return customer
                for line_id in customer.line_ids:
                    line = next((ln for ln in self.db.lines if ln.line_id == line_id), None)
                    if line is not None and _digits(line.phone_number) == wanted:
                        return customer
        raise ToolError(f"Customer with phone number {phone_number} not found")

    @tool
    def get_customer_by_id(self, customer_id: str) -> Customer:
        """Get a customer by customer ID."""
        return self._customer(customer_id)

    @tool
    def get_customer_by_name(self, full_name: str, dob: str) -> list[Customer]:
        """Search customers by full name and date of birth (YYYY-MM-DD). May return several or none."""
        wanted = _fold(full_name)
        return [c for c in self.db.customers if _fold(c.full_name) == wanted and c.date_of_birth == dob]

    @tool
    def get_details_by_id(self, id: str) -> Customer | Line | Device | Bill | Plan:
        """Get the record for an ID of a customer (C...), line (L...), device (D...), bill (B...) or plan (P...)."""
        lookups = {"L": self._line, "D": self._device, "B": self._bill, "C": self._customer, "P": self._plan}
        getter = lookups.get(id[:1])
        if getter is None:
            raise ToolError(f"Unknown ID format or type: {id}")
        return getter(id)

    # -- lines -----------------------------------------------------------------------------
    @tool(mutates=True)
    def suspend_line(self, customer_id: str, line_id: str, reason: str) -> dict[str, Any]:
        """Suspend an active line of the customer (at most 6 months; a $5/month holding fee applies)."""
        line = self._customer_line(customer_id, line_id)
        if line.status != LineStatus.ACTIVE:
            raise ToolError("Line must be active to suspend")
        line.status = LineStatus.SUSPENDED
        line.suspension_start_date = TODAY
        return {"message": "Line suspended successfully. $5/month holding fee will apply.", "line": line}

    @tool(mutates=True)
    def resume_line(self, customer_id: str, line_id: str) -> dict[str, Any]:
        """Resume a suspended (or pending activation) line of the customer."""
        line = self._customer_line(customer_id, line_id)
        if line.status not in (LineStatus.SUSPENDED, LineStatus.PENDING_ACTIVATION):
            raise ToolError("Line must be suspended to resume")
        line.status = LineStatus.ACTIVE
        line.suspension_start_date = None
        return {"message": "Line resumed successfully", "line": line}

    # -- billing ---------------------------------------------------------------------------
    @tool
    def get_bills_for_customer(self, customer_id: str, limit: int = 12) -> list[Bill]:
        """List the customer's bills, newest first (at most `limit`)."""
        customer = self._customer(customer_id)
        bills = sorted((self._bill(i) for i in customer.bill_ids), key=lambda b: b.issue_date, reverse=True)
        return bills[:limit]

    @tool(mutates=True)
    def send_payment_request(self, customer_id: str, bill_id: str) -> str:
        """Ask the customer to pay one of their bills (sets it to Awaiting Payment).
        Fails if another bill already awaits payment. It does not check whether the bill is already paid."""
        customer = self._customer(customer_id)
        if self._bills_awaiting_payment(customer):
            raise ToolError("A bill is already awaiting payment for this customer")
        if bill_id not in customer.bill_ids:
            raise ToolError(f"Bill {bill_id} not found for customer {customer_id}")
        bill = self._bill(bill_id)
        bill.status = BillStatus.AWAITING_PAYMENT
        return f"Payment request sent to the customer for bill {bill.bill_id}"

    # -- usage and roaming -----------------------------------------------------------------
    @tool
    def get_data_usage(self, customer_id: str, line_id: str) -> dict[str, Any]:
        """Data used this billing cycle on a line, with its data limit, refueled data and cycle end date."""
        line = self._customer_line(customer_id, line_id)
        plan = self._plan(line.plan_id)
        return {
            "line_id": line_id,
            "data_used_gb": line.data_used_gb,
            "data_limit_gb": plan.data_limit_gb,
            "data_refueling_gb": line.data_refueling_gb,
            "cycle_end_date": _first_of_next_month(TODAY) - datetime.timedelta(days=1),
        }

    @tool(mutates=True)
    def enable_roaming(self, customer_id: str, line_id: str) -> str:
        """Enable international roaming on the customer's line."""
        line = self._customer_line(customer_id, line_id)
        if line.roaming_enabled:
            return "Roaming was already enabled"
        line.roaming_enabled = True
        return "Roaming enabled successfully"

    @tool(mutates=True)
    def disable_roaming(self, customer_id: str, line_id: str) -> str:
        """Disable international roaming on the customer's line."""
        line = self._customer_line(customer_id, line_id)
        if not line.roaming_enabled:
            return "Roaming was already disabled"
        line.roaming_enabled = False
        return "Roaming disabled successfully"

    @tool
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the customer over to a human agent, with a summary of the issue. Only do this if the
        customer explicitly asks for a human, or if the policy and your tools cannot solve the issue."""
        return "Transfer successful"

    @tool(mutates=True)
    def refuel_data(self, customer_id: str, line_id: str, gb_amount: float) -> dict[str, Any]:
        """Add `gb_amount` GB of data to the customer's line; the plan's refueling price per GB is charged to their next bill."""
        line = self._customer_line(customer_id, line_id)
        if gb_amount <= 0:
            raise ToolError("Refuel amount must be positive")
        plan = self._plan(line.plan_id)
        charge = gb_amount * plan.data_refueling_price_per_gb
        line.data_refueling_gb += gb_amount
        self._apply_one_time_charge(
            customer_id, charge, f"Data refueling: {gb_amount} GB at ${plan.data_refueling_price_per_gb}/GB"
        )
        return {
            "message": f"Successfully added {gb_amount} GB of data for line {line_id} for ${charge:.2f}",
            "new_data_refueling_gb": line.data_refueling_gb,
            "charge": charge,
        }

    # -- task set-up (environment functions, not tools) ------------------------------------
    def get_available_plan_ids(self) -> list[str]:
        return [plan.plan_id for plan in self.db.plans]

    def set_data_usage(self, customer_id: str, line_id: str, data_used_gb: float) -> str:
        """Set the data used this cycle on a line."""
        line = self._customer_line(customer_id, line_id)
        line.data_used_gb = data_used_gb
        return f"Data usage set to {data_used_gb} GB for line {line_id}"

    def suspend_line_for_overdue_bill(
        self, customer_id: str, line_id: str, new_bill_id: str, contract_ended: bool
    ) -> str:
        """Create an overdue bill of one month's plan price for the line and suspend the line.
        With ``contract_ended`` the line's contract is also made to end last month."""
        line = self._line(line_id)
        if line.status != LineStatus.ACTIVE:
            raise ToolError("Line must be active to suspend for unpaid bill")
        plan = self._plan(line.plan_id)
        amount = plan.price_per_month
        if amount <= 0:
            raise ToolError("Amount must be positive for overdue bill")
        customer = self._customer(customer_id)
        if any(self._bill(i).status == BillStatus.OVERDUE for i in customer.bill_ids):
            raise ToolError("Customer already has an overdue bill")
        last_month_end = TODAY.replace(day=1) - datetime.timedelta(days=1)
        last_month_start = last_month_end.replace(day=1)
        bill = Bill(
            bill_id=new_bill_id,
            customer_id=customer_id,
            period_start=last_month_start,
            period_end=last_month_end,
            issue_date=last_month_start,
            total_due=amount,
            due_date=last_month_start + datetime.timedelta(days=14),
            status=BillStatus.OVERDUE,
            line_items=[
                LineItem(description=f"Charge for line {line.line_id}", amount=amount, date=TODAY, item_type="Charge")
            ],
        )
        self.db.bills.append(bill)
        customer.bill_ids.append(new_bill_id)
        line.status = LineStatus.SUSPENDED
        line.suspension_start_date = TODAY
        if contract_ended:
            line.contract_end_date = last_month_end
        return f"Line {line_id} suspended for unpaid bill {new_bill_id}. Contract ended: {contract_ended}"

    # -- assertions (environment functions, not tools) -------------------------------------
    def assert_data_refueling_amount(self, customer_id: str, line_id: str, expected_amount: float) -> bool:
        return abs(self._customer_line(customer_id, line_id).data_refueling_gb - expected_amount) < 1e-6

    def assert_line_status(self, customer_id: str, line_id: str, expected_status: str) -> bool:
        return self._customer_line(customer_id, line_id).status == LineStatus(expected_status)

    def assert_overdue_bill_exists(self, customer_id: str, overdue_bill_id: str) -> bool:
        customer = self._customer(customer_id)
        if overdue_bill_id not in customer.bill_ids:
            raise ToolError(f"Overdue bill {overdue_bill_id} not found")
        if self._bill(overdue_bill_id).status != BillStatus.OVERDUE:
            raise ToolError(f"Overdue bill {overdue_bill_id} is not overdue")
        return True

    def assert_no_overdue_bill(self, overdue_bill_id: str) -> bool:
        """True when the bill does not exist or has been paid."""
        bill = next((b for b in self.db.bills if b.bill_id == overdue_bill_id), None)
        return bill is None or bill.status == BillStatus.PAID
