"""Topics, subscriptions and rules with the Python SDK: entities and rules
through ServiceBusAdministrationClient over HTTPS, messages over AMQP."""

import datetime

import pytest
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError
from azure.servicebus import ServiceBusMessage, ServiceBusSubQueue
from azure.servicebus.management import (
    CorrelationRuleFilter,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)

from support import body, props, receive_n, receive_none, unique


def test_administration(admin):
    q = unique("adm")
    created = admin.create_queue(q, max_delivery_count=5, lock_duration=datetime.timedelta(seconds=30))
    assert created.name == q and created.max_delivery_count == 5
    assert admin.get_queue(q).lock_duration == datetime.timedelta(seconds=30)
    assert q in [x.name for x in admin.list_queues()]
    with pytest.raises(ResourceExistsError):
        admin.create_queue(q)
    props_ = admin.get_queue(q)
    props_.max_delivery_count = 7
    admin.update_queue(props_)
    assert admin.get_queue(q).max_delivery_count == 7
    assert admin.get_queue_runtime_properties(q).active_message_count == 0
    admin.delete_queue(q)
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue(q)


def test_rules_route_messages(client, admin):
    topic = unique("t")
    admin.create_topic(topic)
    for sub in ("eu", "vip", "all"):
        admin.create_subscription(topic, sub)
    # eu: a SQL filter with an action, instead of the default rule.
    admin.delete_rule(topic, "eu", "$Default")
    admin.create_rule(topic, "eu", "region", filter=SqlRuleFilter("region = 'eu' AND amount > 10"),
                      action=SqlRuleAction("SET priority = 'high'"))
    # vip: a correlation filter on a system and an application property.
    admin.delete_rule(topic, "vip", "$Default")
    admin.create_rule(topic, "vip", "vip", filter=CorrelationRuleFilter(correlation_id="vip", properties={"tier": "gold"}))
    assert sorted(r.name for r in admin.list_rules(topic, "eu")) == ["region"]
    rule = admin.get_rule(topic, "vip", "vip")
    assert isinstance(rule.filter, CorrelationRuleFilter) and rule.filter.correlation_id == "vip"
    assert [r.name for r in admin.list_rules(topic, "all")] == ["$Default"]
    assert isinstance(admin.get_rule(topic, "all", "$Default").filter, TrueRuleFilter)

    with client.get_topic_sender(topic) as sender:
        sender.send_messages([
            ServiceBusMessage("eu-big", application_properties={"region": "eu", "amount": 50}),
            ServiceBusMessage("eu-small", application_properties={"region": "eu", "amount": 5}),
            ServiceBusMessage("gold", correlation_id="vip", application_properties={"tier": "gold"}),
            ServiceBusMessage("silver", correlation_id="vip", application_properties={"tier": "silver"}),
        ])
    with client.get_subscription_receiver(topic, "eu") as r:
        [m] = receive_n(r, 1)
        assert body(m) == b"eu-big" and props(m)["priority"] == "high"
        r.complete_message(m)
        receive_none(r, wait=0.5)
    with client.get_subscription_receiver(topic, "vip") as r:
        [m] = receive_n(r, 1)
        assert body(m) == b"gold"
        r.complete_message(m)
        receive_none(r, wait=0.5)
    with client.get_subscription_receiver(topic, "all") as r:
        got = receive_n(r, 4)
        assert [body(m) for m in got] == [b"eu-big", b"eu-small", b"gold", b"silver"]
        for m in got:
            r.complete_message(m)

    # Rule changes apply to later messages.
    admin.delete_rule(topic, "vip", "vip")
    with pytest.raises(ResourceNotFoundError):
        admin.get_rule(topic, "vip", "vip")
    with client.get_topic_sender(topic) as sender:
        sender.send_messages(ServiceBusMessage("gold-2", correlation_id="vip", application_properties={"tier": "gold"}))
    with client.get_subscription_receiver(topic, "vip") as r:
        receive_none(r, wait=0.5)
    admin.delete_topic(topic)


def test_subscription_settlement_and_dlq(client, admin):
    topic = unique("t")
    admin.create_topic(topic)
    admin.create_subscription(topic, "s")
    with client.get_topic_sender(topic) as sender:
        sender.send_messages([ServiceBusMessage("keep"), ServiceBusMessage("bad")])
    with client.get_subscription_receiver(topic, "s") as r:
        keep, bad = receive_n(r, 2)
        r.abandon_message(keep)
        r.dead_letter_message(bad, reason="broken", error_description="no good")
        [again] = receive_n(r, 1)
        assert body(again) == b"keep" and again.delivery_count == 1
        r.complete_message(again)
    with client.get_subscription_receiver(topic, "s", sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dlq:
        [d] = receive_n(dlq, 1)
        assert body(d) == b"bad" and d.dead_letter_reason == "broken"
        dlq.complete_message(d)
    runtime = admin.get_subscription_runtime_properties(topic, "s")
    assert runtime.active_message_count == 0 and runtime.dead_letter_message_count == 0
