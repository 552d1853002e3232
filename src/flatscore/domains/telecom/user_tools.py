"""The user's phone (tau2-bench's ``TelecomUserTools``: same tool names, arguments, semantics).

The user side of dual control: the user, not the agent, calls these to inspect and change
their phone. As in tau2, most failures are reported in the returned text (the phone shows a
message) rather than raised; only malformed calls fail. The non-tool public methods are
tau2's task set-up functions (``turn_airplane_mode_on``, ``break_apn_settings``, ...) and
``assert_*`` checks, called through ``Environment.run_env_function``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationError

from ..toolkit import ToolError, Toolkit, tool
from .user_data_model import (
    APNNames,
    APNSettings,
    NetworkModePreference,
    NetworkStatus,
    NetworkTechnology,
    PerformanceLevel,
    PhoneDevice,
    SignalStrength,
    SimStatus,
    Surroundings,
    TelecomUserDB,
    VpnDetails,
)

NetworkMode = Literal["4g_5g_preferred", "4g_only", "3g_only", "2g_only"]

_SIGNAL_LABEL = {
    SignalStrength.NONE: "No Signal",
    SignalStrength.POOR: "Signal: Poor (1 bar)",
    SignalStrength.FAIR: "Signal: Fair (2 bars)",
    SignalStrength.GOOD: "Signal: Good (3 bars)",
    SignalStrength.EXCELLENT: "Signal: Excellent (4 bars)",
}
#: download speed range (Mbps) per technology, as in tau2
_TECH_SPEED = {
    NetworkTechnology.TWO_G: (0.1, 0.4),
    NetworkTechnology.THREE_G: (1.0, 5.0),
    NetworkTechnology.FOUR_G: (10.0, 100.0),
    NetworkTechnology.FIVE_G: (50.0, 500.0),
    NetworkTechnology.NONE: (0.0, 0.0),
}
_SIGNAL_FACTOR = {
    SignalStrength.NONE: 0.0,
    SignalStrength.POOR: 0.2,
    SignalStrength.FAIR: 0.5,
    SignalStrength.GOOD: 0.8,
    SignalStrength.EXCELLENT: 1.0,
}
_MODE_TECH = {
    NetworkModePreference.FOUR_G_ONLY: NetworkTechnology.FOUR_G,
    NetworkModePreference.THREE_G_ONLY: NetworkTechnology.THREE_G,
    NetworkModePreference.TWO_G_ONLY: NetworkTechnology.TWO_G,
}
_SPEED_ADVICE = {
    "Very Poor": "Very slow; even basic browsing may be hard.",
    "Poor": "Slow; browsing may lag and streaming is difficult.",
    "Fair": "Fine for browsing and standard-definition video.",
    "Good": "Good for most uses, including HD streaming.",
    "Excellent": "Very fast.",
}
DEFAULT_VPN = VpnDetails(
    server_address="192.168.1.1", protocol="OpenVPN", server_performance=PerformanceLevel.EXCELLENT
)


def _speed_label(mbps: float) -> str:
    if mbps < 1:
        return "Very Poor"
    if mbps < 5:
        return "Poor"
    if mbps < 25:
        return "Fair"
    if mbps < 100:
        return "Good"
    return "Excellent"


class TelecomUserTools(Toolkit):
    """What the user can see and do on their phone, over a :class:`TelecomUserDB`."""

    side = "user"
    db: TelecomUserDB

    @property
    def device(self) -> PhoneDevice:
        return self.db.device

    @property
    def surroundings(self) -> Surroundings:
        return self.db.surroundings

    # ======================================================================================
    # Device model (helpers)
    # ======================================================================================
    def _sim_status(self) -> SimStatus:
        return SimStatus.MISSING if self.device.sim_card_missing else self.device.sim_card_status

    def _no_service(self) -> None:
        d = self.device
        d.network_connection_status = NetworkStatus.NO_SERVICE
        d.network_technology_connected = NetworkTechnology.NONE
        d.network_signal_strength = SignalStrength.NONE

    def _mobile_data_working(self) -> bool:
        d, s = self.device, self.surroundings
        if d.airplane_mode or d.network_signal_strength == SignalStrength.NONE:
            return False
        if d.network_connection_status == NetworkStatus.NO_SERVICE:
            return False
        if s.is_abroad and not (d.roaming_enabled and s.roaming_allowed):
            return False
        if not d.data_enabled:
            return False
        return not s.mobile_data_usage_exceeded

    def _speed_test(self) -> tuple[float | None, str]:
        d = self.device
        if not self._mobile_data_working():
            return None, "No Connection"
        factor = 1.0
        if d.vpn_connected and d.vpn_details is not None and d.vpn_details.server_performance == PerformanceLevel.POOR:
            factor = 0.1
        if d.data_saver_mode:
            factor *= 0.2
        low, high = _TECH_SPEED.get(d.network_technology_connected, (0.0, 0.0))
        speed = round((low + high) / 2.0 * _SIGNAL_FACTOR.get(d.network_signal_strength, 0.0) * factor, 2)
        return speed, _speed_label(speed)

    def _can_send_mms(self) -> bool:
        d = self.device
        if not self._mobile_data_working():
            return False
        if d.network_technology_connected == NetworkTechnology.TWO_G:
            return False
        if d.wifi_calling_enabled and d.wifi_calling_mms_over_wifi:
            return False  # the carrier does not carry MMS over Wi-Fi
        if d.active_apn_settings.mmsc_url is None:
            return False
        app = d.app_statuses.get("messaging")
        return app is not None and app.permissions.sms and app.permissions.storage

    def _status_bar(self) -> str:
        d = self.device
        parts: list[str] = []
        if d.airplane_mode:
            parts.append("Airplane Mode")
        else:
            parts.append(_SIGNAL_LABEL.get(d.network_signal_strength, "No Signal"))
            has_tech = d.network_technology_connected != NetworkTechnology.NONE
            if has_tech:
                parts.append(d.network_technology_connected.value)
            if d.data_enabled and has_tech:
                parts.append("Mobile Data On")
                if d.data_saver_mode:
                    parts.append("Data Saver")
            else:
                parts.append("Mobile Data Off")
        if d.wifi_enabled and d.wifi_connected:
            parts.append(f"Wi-Fi: {d.wifi_ssid}" if d.wifi_ssid else "Wi-Fi On")
        if d.vpn_connected:
            parts.append("VPN Connected")
        parts.append(f"Battery {d.battery_level}%")
        return "Status Bar: " + " | ".join(parts)

    def _with_bar(self, message: str) -> str:
        return f"{message}\n{self._status_bar()}"

    def _toggle_airplane(self) -> bool:
        d = self.device
        turning_on = not d.airplane_mode
        d.airplane_mode = turning_on
        if not turning_on:
            d.network_connection_status = NetworkStatus.SEARCHING
        if turning_on or d.wifi_enabled:
            d.wifi_connected = False
            d.wifi_ssid = None
            d.wifi_signal_strength = SignalStrength.NONE
        if turning_on and d.vpn_connected:
            self._drop_vpn()
        self.simulate_network_search()
        return d.airplane_mode

    def _toggle_data(self) -> bool:
        self.device.data_enabled = not self.device.data_enabled
        self.simulate_network_search()
        return self.device.data_enabled

    def _toggle_roaming(self) -> bool:
        self.device.roaming_enabled = not self.device.roaming_enabled
        self.simulate_network_search()
        return self.device.roaming_enabled

    def _toggle_data_saver(self) -> bool:
        self.device.data_saver_mode = not self.device.data_saver_mode
        return self.device.data_saver_mode

    def _toggle_wifi_calling(self) -> bool:
        self.device.wifi_calling_enabled = not self.device.wifi_calling_enabled
        return self.device.wifi_calling_enabled

    def _drop_vpn(self) -> bool:
        if not self.device.vpn_connected:
            return False
        self.device.vpn_connected = False
        self.device.vpn_details = None
        return True

    def _granted(self, app_name: str) -> list[str] | None:
        app = self.device.app_statuses.get(app_name)
        if app is None:
            return None
        return [name.replace("_", " ").lower() for name, on in app.permissions.model_dump().items() if on]

    # ======================================================================================
    # Core simulation (public: tau2 uses it as an initialization function)
    # ======================================================================================
    def simulate_network_search(self) -> None:
        """Re-evaluate the cellular connection from the SIM, mode preference, airplane mode, APN and line."""
        d, s = self.device, self.surroundings
        if self._sim_status() == SimStatus.ACTIVE:
            d.network_connection_status = NetworkStatus.CONNECTED
            pref = d.network_mode_preference
            if pref == NetworkModePreference.FOUR_G_5G_PREFERRED:
                five_g = s.signal_strength.get(NetworkTechnology.FIVE_G, SignalStrength.NONE)
                tech = NetworkTechnology.FOUR_G if five_g == SignalStrength.NONE else NetworkTechnology.FIVE_G
            else:
                tech = _MODE_TECH.get(pref, NetworkTechnology.FOUR_G)
            d.network_technology_connected = tech
            d.network_signal_strength = s.signal_strength.get(tech, SignalStrength.NONE)
        else:
            self._no_service()
        if d.airplane_mode or d.active_apn_settings.apn_name == APNNames.BROKEN or not s.line_active:
            self._no_service()

    # ======================================================================================
    # Tools: status
    # ======================================================================================
    @tool
    def check_status_bar(self) -> str:
        """Show the icons in the phone's status bar: signal strength, network type, mobile data (on/off, data saver), Wi-Fi, VPN, battery."""
        return self._status_bar()

    @tool
    def check_network_status(self) -> str:
        """Show the phone's cellular and Wi-Fi connection: airplane mode, SIM, connection, signal, network type, mobile data, data roaming."""
        d = self.device
        lines = [
            f"Airplane Mode: {'ON' if d.airplane_mode else 'OFF'}",
            f"SIM Card Status: {self._sim_status().value}",
            f"Cellular Connection: {d.network_connection_status.value}",
            f"Cellular Signal: {d.network_signal_strength.value}",
            f"Cellular Network Type: {d.network_technology_connected.value}",
            f"Mobile Data Enabled: {'Yes' if d.data_enabled else 'No'}",
            f"Data Roaming Enabled: {'Yes' if d.roaming_enabled else 'No'}",
            f"Wi-Fi Radio: {'ON' if d.wifi_enabled else 'OFF'}",
            f"Wi-Fi Connected: {'Yes' if d.wifi_connected else 'No'}",
        ]
        if d.wifi_connected:
            lines.append(f"Connected Wi-Fi Network: {d.wifi_ssid}")
        return "\n".join(lines)

    @tool
    def check_network_mode_preference(self) -> str:
        """Show which cellular network types the phone prefers."""
        return f"Network Mode Preference: {self.device.network_mode_preference.value}"

    @tool(mutates=True)
    def set_network_mode_preference(self, mode: NetworkMode) -> str:
        """Choose the preferred cellular network type: 4g_5g_preferred, 4g_only, 3g_only or 2g_only. Faster types (4G/5G) give faster data."""
        try:
            chosen = NetworkModePreference(mode)
        except ValueError:
            options = ", ".join(m.value for m in NetworkModePreference)
            return self._with_bar(f"Could not set network mode: '{mode}' is not an option. Choose one of: {options}")
        self.device.network_mode_preference = chosen
        self.simulate_network_search()
        return self._with_bar(f"Preferred Network Mode set to: {chosen.value}")

    @tool
    def run_speed_test(self) -> str:
        """Measure the current mobile internet download speed and say what it is good for."""
        speed, label = self._speed_test()
        if speed is None:
            return f"Speed test failed: {label}."
        return f"Speed Test Result: {speed:.2f} Mbps ({label}). {_SPEED_ADVICE[label]}"

    # ======================================================================================
    # Tools: airplane mode, SIM
    # ======================================================================================
    @tool(mutates=True)
    def toggle_airplane_mode(self) -> str:
        """Turn Airplane Mode on or off. When on, all radios (cellular, Wi-Fi, Bluetooth) are off."""
        on = self._toggle_airplane()
        return self._with_bar(f"Airplane Mode is now {'ON' if on else 'OFF'}.")

    @tool
    def check_sim_status(self) -> str:
        """Show whether the SIM card is active, missing, or locked by a PIN or PUK code."""
        return {
            SimStatus.ACTIVE: "Your SIM card is active and working.",
            SimStatus.MISSING: "No SIM card detected in the phone.",
            SimStatus.LOCKED_PIN: "The SIM card is locked with a PIN code.",
            SimStatus.LOCKED_PUK: "The SIM card is locked with a PUK code.",
        }[self._sim_status()]

    @tool(mutates=True)
    def reseat_sim_card(self) -> str:
        """Take the SIM card out and put it back in; this can fix a SIM that is not recognised."""
        self.device.sim_card_missing = False
        self.simulate_network_search()
        return self._with_bar("SIM card re-seated successfully.")

    # ======================================================================================
    # Tools: mobile data, roaming, data saver
    # ======================================================================================
    @tool(mutates=True)
    def toggle_data(self) -> str:
        """Turn mobile data on or off (cellular internet when not on Wi-Fi)."""
        on = self._toggle_data()
        return self._with_bar(f"Mobile Data is now {'ON' if on else 'OFF'}.")

    @tool(mutates=True)
    def toggle_roaming(self) -> str:
        """Turn Data Roaming on or off. When on, the phone may use mobile data on other networks (e.g. abroad)."""
        on = self._toggle_roaming()
        return self._with_bar(f"Data Roaming is now {'ON' if on else 'OFF'}.")

    @tool
    def check_data_restriction_status(self) -> str:
        """Show whether data-limiting features (Data Saver) are on."""
        if self.device.data_saver_mode:
            return "Data Saver mode is ON (limits data usage)."
        return "Data Saver mode is OFF."

    @tool(mutates=True)
    def toggle_data_saver_mode(self) -> str:
        """Turn Data Saver on or off. When on, it cuts data use and slows data speed."""
        on = self._toggle_data_saver()
        return self._with_bar(f"Data Saver Mode is now {'ON' if on else 'OFF'}.")

    # ======================================================================================
    # Tools: APN
    # ======================================================================================
    @tool
    def check_apn_settings(self) -> str:
        """Show the APN settings used for mobile data and picture messages (APN name, MMSC URL)."""
        apn = self.device.active_apn_settings
        return (
            f"Current APN Name: {apn.apn_name.value or 'Not Set'}\n"
            f"MMSC URL (for picture messages): {apn.mmsc_url or 'Not Set'}\n"
            "(These are technical settings, usually best left unchanged.)"
        )

    @tool(mutates=True)
    def set_apn_settings(self, apn_settings: dict[str, Any]) -> str:
        """Replace the phone's APN settings (fields: apn_name, mms_apn, mmsc_url, mms_proxy, mms_port)."""
        try:
            settings = APNSettings.model_validate(apn_settings)
        except ValidationError as exc:
            raise ToolError(f"Invalid APN settings: {exc.errors()[0]['msg']}") from exc
        self.device.active_apn_settings = settings
        self.simulate_network_search()
        return self._with_bar(f"APN settings set to: {settings.apn_name.value}")

    @tool(mutates=True)
    def reset_apn_settings(self) -> str:
        """Reset the APN settings to the carrier defaults (takes effect at the next reboot)."""
        self.device.active_apn_settings.reset_at_reboot = True
        self.simulate_network_search()
        return self._with_bar("APN settings will reset at reboot.")

    # ======================================================================================
    # Tools: Wi-Fi, Wi-Fi calling
    # ======================================================================================
    @tool
    def check_wifi_status(self) -> str:
        """Show whether Wi-Fi is on, which network it is connected to and the signal strength."""
        d = self.device
        if not d.wifi_enabled:
            return "Wi-Fi is turned OFF."
        if d.wifi_connected:
            return f"Wi-Fi is ON and connected to '{d.wifi_ssid}'. Signal strength: {d.wifi_signal_strength.value}."
        return "Wi-Fi is ON but not connected to any network."

    @tool(mutates=True)
    def toggle_wifi(self) -> str:
        """Turn the Wi-Fi radio on or off."""
        d = self.device
        if d.airplane_mode:
            return self._with_bar("Cannot change Wi-Fi settings while Airplane Mode is ON.")
        d.wifi_enabled = not d.wifi_enabled
        if not d.wifi_enabled:
            d.wifi_connected = False
            d.wifi_ssid = None
            d.wifi_signal_strength = SignalStrength.NONE
        return self._with_bar(f"Wi-Fi is now {'ON' if d.wifi_enabled else 'OFF'}.")

    @tool
    def check_wifi_calling_status(self) -> str:
        """Show whether Wi-Fi Calling (calls over Wi-Fi instead of the cellular network) is on."""
        return f"Wi-Fi Calling is currently turned {'ON' if self.device.wifi_calling_enabled else 'OFF'}."

    @tool(mutates=True)
    def toggle_wifi_calling(self) -> str:
        """Turn Wi-Fi Calling on or off."""
        on = self._toggle_wifi_calling()
        return self._with_bar(f"Wi-Fi Calling is now {'ON' if on else 'OFF'}.")

    # ======================================================================================
    # Tools: VPN
    # ======================================================================================
    @tool
    def check_vpn_status(self) -> str:
        """Show whether a VPN is on and connected, with its connection details."""
        d = self.device
        if d.vpn_connected:
            if d.vpn_details is not None:
                return f"VPN is ON and connected. Details: {d.vpn_details.model_dump(mode='json')}"
            return "VPN is ON and connected (no specific details available)."
        if d.vpn_enabled_setting:
            return "VPN is turned ON in settings, but currently not connected."
        return "VPN is turned OFF."

    @tool(mutates=True)
    def connect_vpn(self) -> str:
        """Connect to the VPN."""
        d = self.device
        if d.vpn_connected:
            return "VPN already connected."
        d.vpn_connected = True
        d.vpn_details = DEFAULT_VPN.model_copy(deep=True)
        return self._with_bar("VPN connected successfully.")

    @tool(mutates=True)
    def disconnect_vpn(self) -> str:
        """Disconnect the active VPN connection."""
        dropped = self._drop_vpn()
        return self._with_bar(
            "VPN disconnected successfully." if dropped else "No active VPN connection to disconnect."
        )

    # ======================================================================================
    # Tools: apps and MMS
    # ======================================================================================
    @tool
    def check_installed_apps(self) -> str:
        """List the apps installed on the phone."""
        return "The following apps are installed on the phone: " + ", ".join(self.device.app_statuses)

    @tool
    def check_app_status(self, app_name: str) -> str:
        """Show an app's status and the permissions it has."""
        granted = self._granted(app_name)
        if granted is None:
            return f"App '{app_name}' not found on this phone."
        lines = [f"Status for App: {app_name}"]
        if granted:
            lines.append(" - Permissions Granted:")
            lines.extend(f"   - {perm}" for perm in granted)
        else:
            lines.append(" - Permissions: None granted.")
        return "\n".join(lines)

    @tool
    def check_app_permissions(self, app_name: str) -> str:
        """Show which permissions (sms, storage, phone, network) an app has."""
        granted = self._granted(app_name)
        if granted is None:
            return f"App '{app_name}' not found on this phone."
        if not granted:
            return f"App '{app_name}' currently has no permissions granted."
        return f"App '{app_name}' has permission for: {', '.join(granted)}."

    @tool(mutates=True)
    def grant_app_permission(self, app_name: str, permission: str) -> str:
        """Give an app a permission (lowercase: sms, storage, phone or network)."""
        app = self.device.app_statuses.get(app_name)
        permission = permission.lower()
        if app is None:
            return self._with_bar(f"Error. App '{app_name}' not found. Cannot grant permission.")
        known = list(app.permissions.model_dump())
        if permission not in known:
            return self._with_bar(
                f"Error. Permission '{permission}' not tracked for app '{app_name}', available permissions: {known}"
            )
        setattr(app.permissions, permission, True)
        return self._with_bar(f"Success. Permission '{permission}' granted to app '{app_name}'.")

    @tool
    def can_send_mms(self) -> str:
        """Check whether the messaging app can send MMS (picture) messages."""
        if self._can_send_mms():
            return "Your messaging app can send MMS messages."
        return "Your messaging app cannot send MMS messages."

    # ======================================================================================
    # Tools: reboot, payments
    # ======================================================================================
    @tool(mutates=True)
    def reboot_device(self) -> str:
        """Restart the phone; this refreshes network services and applies pending APN resets."""
        steps = []
        if self.device.active_apn_settings.reset_at_reboot:
            steps.append("Resetting APN settings...")
            self.device.active_apn_settings = APNSettings()
        steps.append("Restarting network services...")
        self.device.network_connection_status = NetworkStatus.SEARCHING
        self.simulate_network_search()
        return self._with_bar("\n".join(steps))

    @tool
    def check_payment_request(self) -> str:
        """Check whether the agent has sent you a payment request."""
        request = self.surroundings.payment_request
        if request is None:
            return "No payment request has been made."
        return f"You have a payment request for bill {request.bill_id} of {request.amount_due} USD."

    @tool(mutates=True)
    def make_payment(self) -> str:
        """Pay the bill of the payment request the agent sent you."""
        request = self.surroundings.payment_request
        if request is None:
            return "You do not have a payment request."
        request.paid = True
        return f"Payment of {request.amount_due} USD has been made for bill {request.bill_id}."

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
