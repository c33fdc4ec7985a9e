"""The SDK under test is the uamqp-based azure-servicebus that Debian ships."""

import azure.servicebus
import azure.servicebus._base_handler as base_handler


def test_sdk_is_released_7x_on_uamqp():
    major, minor, _ = azure.servicebus.__version__.split(".", 2)
    assert major == "7" and int(minor) <= 11, "7.x up to 7.11 runs on uamqp; got %s" % azure.servicebus.__version__
    assert hasattr(base_handler, "uamqp"), "the SDK runs on Azure's C uamqp"
