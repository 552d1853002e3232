"""The simulated phone's behaviour: how its settings and surroundings decide what it can do.

tau2's device model, kept apart from the tools that expose it: whether the phone has service,
which network it uses, whether mobile data works and how fast, whether MMS can be sent, and
what the status bar shows. The user tools (:mod:`.phone_tools`), the task set-up functions and
the assertions (:mod:`.user_tools`) all read and change the phone through these helpers, so
the rules live in one place.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from ..toolkit import Toolkit
from .user_data_model import (
    APNNames,
    NetworkModePreference,
    NetworkStatus,
    NetworkTechnology,
    PerformanceLevel,
    PhoneDevice,
    SignalStrength,
    SimStatus,
    Surroundings,
    TelecomUserDB,
)

#: the status bar's words: flatscore's own, plain ones (default mode)...
_BAR: dict[str, Any] = {
    "airplane": "Airplane Mode",
    "signal": {
        SignalStrength.NONE: "No Signal",
        SignalStrength.POOR: "Signal: Poor (1 bar)",
        SignalStrength.FAIR: "Signal: Fair (2 bars)",
        SignalStrength.GOOD: "Signal: Good (3 bars)",
        SignalStrength.EXCELLENT: "Signal: Excellent (4 bars)",
    },
    "data_on": "Mobile Data On",
    "data_saver": "Data Saver",
    "data_off": "Mobile Data Off",
    "wifi_ssid": "Wi-Fi: {}",
    "wifi_on": "Wi-Fi On",
    "vpn": "VPN Connected",
    "battery": "Battery {}%",
}
#: ...and the indicator tokens tau2's phone shows (parity mode: a model must read the same bytes)
_TAU2_BAR: dict[str, Any] = {
    "airplane": "\u2708\ufe0f Airplane Mode",
    "signal": {
        SignalStrength.NONE: "\U0001f4f5 No Signal",
        SignalStrength.POOR: "\U0001f4f6\u00b9 Poor",
        SignalStrength.FAIR: "\U0001f4f6\u00b2 Fair",
        SignalStrength.GOOD: "\U0001f4f6\u00b3 Good",
        SignalStrength.EXCELLENT: "\U0001f4f6\u2074 Excellent",
    },
    "data_on": "\U0001f4f1 Data Enabled",
    "data_saver": "\U0001f53d Data Saver",
    "data_off": "\U0001f4f5 Data Disabled",
    "wifi_ssid": "\U0001f4e1 Connected to {}",
    "wifi_on": "\U0001f4e1 Enabled",
    "vpn": "\U0001f512 VPN Connected",
    "battery": "\U0001f50b {}%",
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


class PhoneModel(Toolkit):
    """The phone's state (a :class:`TelecomUserDB`) and the rules that derive what it shows."""

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
        words = _TAU2_BAR if self.tau2_parity else _BAR
        parts: list[str] = []
        if d.airplane_mode:
            parts.append(words["airplane"])
        else:
            parts.append(words["signal"].get(d.network_signal_strength, words["signal"][SignalStrength.NONE]))
            has_tech = d.network_technology_connected != NetworkTechnology.NONE
            if has_tech:
                parts.append(d.network_technology_connected.value)
            if d.data_enabled and has_tech:
                parts.append(words["data_on"])
                if d.data_saver_mode:
                    parts.append(words["data_saver"])
            else:
                parts.append(words["data_off"])
        if d.wifi_enabled and d.wifi_connected:
            parts.append(words["wifi_ssid"].format(d.wifi_ssid) if d.wifi_ssid else words["wifi_on"])
        if d.vpn_connected:
            parts.append(words["vpn"])
        parts.append(words["battery"].format(d.battery_level))
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
                # a preference stored as sent (parity mode: a list, None) falls back to 4G, as in tau2
                tech = (
                    _MODE_TECH.get(pref, NetworkTechnology.FOUR_G)
                    if isinstance(pref, Hashable)
                    else NetworkTechnology.FOUR_G
                )
            d.network_technology_connected = tech
            d.network_signal_strength = s.signal_strength.get(tech, SignalStrength.NONE)
        else:
            self._no_service()
        if d.airplane_mode or d.active_apn_settings.apn_name == APNNames.BROKEN or not s.line_active:
            self._no_service()
