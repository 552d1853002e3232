"""The tools the user calls on their phone (tau2-bench's user tool names, arguments, semantics).

Each tool inspects or changes the phone through :class:`PhoneModel` and, as in tau2, reports
most failures in the returned text (the phone shows a message) rather than raising; only
malformed calls fail.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationError

from ..toolkit import ToolError, tool
from .phone_model import PhoneModel
from .user_data_model import (
    APNSettings,
    NetworkModePreference,
    NetworkStatus,
    PerformanceLevel,
    SignalStrength,
    SimStatus,
    VpnDetails,
)

NetworkMode = Literal["4g_5g_preferred", "4g_only", "3g_only", "2g_only"]

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


class PhoneTools(PhoneModel):
    """Every user tool, in the order the agent and user see them."""

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
        options = ", ".join(m.value for m in NetworkModePreference)
        if self.tau2_parity:
            return self._set_mode_as_tau2(mode, options)
        try:
            chosen = NetworkModePreference(mode)
        except ValueError:
            return self._with_bar(f"Could not set network mode: '{mode}' is not an option. Choose one of: {options}")
        self.device.network_mode_preference = chosen
        self.simulate_network_search()
        return self._with_bar(f"Preferred Network Mode set to: {chosen.value}")

    def _set_mode_as_tau2(self, mode: Any, options: str) -> str:
        """tau2's behaviour (parity mode): only a string is checked; anything else is stored as sent
        and the network searched, so ``None`` is stored and then refused, and a list is stored and
        then fails on its ``.value`` (an error result)."""
        chosen = mode
        if isinstance(mode, str):
            try:
                chosen = NetworkModePreference(mode)
            except ValueError:
                chosen = None
            else:
                self.device.network_mode_preference = chosen
                self.simulate_network_search()
        else:
            self.device.network_mode_preference = chosen
            self.simulate_network_search()
        if chosen is None:
            return self._with_bar(
                f"Failed to set network mode: '{mode}' is not a valid option. Please use one of: {options}"
            )
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
