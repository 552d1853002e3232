"""The user's phone (tau2-bench's ``TelecomUserTools``: same tool names, arguments, semantics).

The user side of dual control: the user, not the agent, calls these to inspect and change
their phone. As in tau2, most failures are reported in the returned text (the phone shows a
message) rather than raised; only malformed calls fail. The non-tool public methods are
tau2's task set-up functions (``turn_airplane_mode_on``, ``break_apn_settings``, ...) and
``assert_*`` checks, called through ``Environment.run_env_function``.

The phone's rules live in :mod:`.phone_model` and its tools in :mod:`.phone_tools`; this
module adds the set-up functions and checks and assembles the class tau2 names.
"""

from __future__ import annotations

from typing import Literal

from ..toolkit import ToolError
from .phone_tools import DEFAULT_VPN, NetworkMode, PhoneTools
from .user_data_model import APNNames, NetworkStatus, PerformanceLevel, SimStatus, TelecomUserDB

__all__ = ["DEFAULT_VPN", "NetworkMode", "TelecomUserTools"]


class TelecomUserTools(PhoneTools):
    """What the user can see and do on their phone, over a :class:`TelecomUserDB`."""

    side = "user"
    db: TelecomUserDB

    # ======================================================================================
    # Task set-up functions (not tools)
    # ======================================================================================
    def set_user_info(self, name: str, phone_number: str) -> None:
        self.surroundings.name = name
        self.surroundings.phone_number = phone_number

    def set_user_location(self, abroad: bool) -> None:
        self.surroundings.is_abroad = abroad

    def turn_airplane_mode_on(self) -> str:
        if not self._toggle_airplane():
            self._toggle_airplane()
        return "Airplane Mode is now ON."

    def turn_airplane_mode_off(self) -> str:
        if self._toggle_airplane():
            self._toggle_airplane()
        return "Airplane Mode is now OFF."

    def unseat_sim_card(self) -> str:
        self.device.sim_card_missing = True
        self.simulate_network_search()
        return "SIM card un-seated successfully."

    def lock_sim_card(self, mode: Literal["pin", "puk"]) -> str:
        """Lock the SIM with a PIN or PUK; no user tool can undo this."""
        if mode not in ("pin", "puk"):
            raise ToolError(f"Unknown SIM lock mode: {mode}")
        self.device.sim_card_status = SimStatus.LOCKED_PIN if mode == "pin" else SimStatus.LOCKED_PUK
        self.simulate_network_search()
        return f"SIM card locked successfully in {mode} mode."

    def turn_data_on(self) -> str:
        self.device.data_enabled = True
        return "Data connection restored."

    def turn_data_off(self) -> str:
        if self._toggle_data():
            self._toggle_data()
        return "Data connection broken."

    def turn_roaming_on(self) -> str:
        if not self._toggle_roaming():
            self._toggle_roaming()
        return "Data Roaming is now ON."

    def turn_roaming_off(self) -> str:
        if self._toggle_roaming():
            self._toggle_roaming()
        return "Data Roaming is now OFF."

    def turn_data_saver_mode_on(self) -> str:
        if not self._toggle_data_saver():
            self._toggle_data_saver()
        return "Data Saver Mode is now ON."

    def turn_data_saver_mode_off(self) -> str:
        if self._toggle_data_saver():
            self._toggle_data_saver()
        return "Data Saver Mode is now OFF."

    def break_apn_settings(self) -> str:
        self.device.active_apn_settings.apn_name = APNNames.BROKEN
        self.simulate_network_search()
        return "APN settings broken. Please call reset_apn_settings() to fix."

    def break_apn_mms_setting(self) -> str:
        self.device.active_apn_settings.mmsc_url = None
        return "APN MMS setting broken. Please call reset_apn_settings() to fix."

    def set_wifi_calling(self, enabled: bool, mms_over_wifi: bool | None = None) -> str:
        if self.device.wifi_calling_enabled != enabled:
            self._toggle_wifi_calling()
        message = f"Wi-Fi Calling is now {'ON' if enabled else 'OFF'}."
        if mms_over_wifi is not None:
            self.device.wifi_calling_mms_over_wifi = mms_over_wifi
            message += f"\nMMS over Wi-Fi is now {'ON' if mms_over_wifi else 'OFF'}."
        return message

    def break_vpn(self) -> str:
        """Connect a VPN whose server performs poorly (slow mobile data)."""
        self.connect_vpn()
        assert self.device.vpn_details is not None
        self.device.vpn_details.server_performance = PerformanceLevel.POOR
        return "VPN connection broken."

    def remove_app_permission(self, app_name: str, permission: str) -> tuple[bool, str]:
        app = self.device.app_statuses.get(app_name)
        permission = permission.lower()
        if app is None:
            return False, f"App '{app_name}' not found. Cannot remove permission."
        if permission not in app.permissions.model_dump():
            return False, f"Permission '{permission}' not tracked for app '{app_name}'."
        setattr(app.permissions, permission, False)
        return True, f"Permission '{permission}' removed from app '{app_name}'."

    # ======================================================================================
    # Assertions (not tools)
    # ======================================================================================
    def assert_airplane_mode_status(self, expected_status: bool) -> bool:
        return self.device.airplane_mode == expected_status

    def assert_service_status(self, expected_status: str) -> bool:
        return self.device.network_connection_status == NetworkStatus(expected_status)

    def assert_mobile_data_status(self, expected_status: bool) -> bool:
        return self._mobile_data_working() == expected_status

    def assert_mobile_roaming_status(self, expected_status: bool) -> bool:
        return self.device.roaming_enabled == expected_status

    def assert_mobile_data_saver_mode_status(self, expected_status: bool) -> bool:
        return self.device.data_saver_mode == expected_status

    def assert_internet_speed(self, expected_speed: float, expected_desc: str | None = None) -> bool:
        speed, label = self._speed_test()
        speed = speed or 0.0
        if expected_desc is None:
            return speed >= expected_speed
        return speed >= expected_speed and label.lower() == expected_desc.lower()

    def assert_internet_not_excellent(self) -> bool:
        _, label = self._speed_test()
        return label.lower() != "excellent"

    def assert_can_send_mms(self, expected_status: bool) -> bool:
        return self._can_send_mms() == expected_status

    def assert_mobile_data_usage_exceeded(self, expected_status: bool) -> bool:
        return self.surroundings.mobile_data_usage_exceeded == expected_status
