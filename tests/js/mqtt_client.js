'use strict';
// One MQTT.js client for tests/test_js_clients.py.
//
//   node mqtt_client.js --port 1883 --id CLIENT [--version 5] [--timeout-ms 30000]
//                       [--auto-assign-topic-alias]
//
// Commands on stdin, one JSON object a line:
//   {"op": "subscribe", "filter": "a/#", "qos": 1, "nl": true}
//   {"op": "publish", "topic": "a/{i}", "payload": "m{i}", "qos": 1, "count": 10,
//    "properties": {"topicAlias": 3}}        (count: publish i = 0..count-1, `{i}` replaced)
//   {"op": "end"}                             (DISCONNECT, then exit; so does EOF on stdin)
// Events on stdout, one JSON object a line: connect, suback, message, sent (each PUBLISH as it
// goes on the wire, after MQTT.js applied topic aliases), puback (the publish callback: QoS 1
// PUBACK, QoS 2 PUBCOMP, QoS 0 written), disconnect (from the server), error, close, exit.

const mqtt = require('mqtt');
const { parseArgs, emit, finish, serve, numbered } = require('./common');

const args = parseArgs(process.argv.slice(2));
const timeoutMs = Number(args['timeout-ms'] || 30000);

const client = mqtt.connect({
  host: args.host || '127.0.0.1',
  port: Number(args.port),
  clientId: args.id,
  protocolVersion: Number(args.version || 5),
  clean: true,
  reconnectPeriod: 0, // a test sees a lost connection as `close`, never a silent retry
  connectTimeout: 10000,
  autoAssignTopicAlias: Boolean(args['auto-assign-topic-alias']),
});

let isConnected = false;
const connected = new Promise((resolve) => {
  client.once('connect', (connack) => {
    isConnected = true;
    emit('connect', { session_present: connack.sessionPresent, properties: connack.properties });
    resolve();
  });
});

client.on('message', (topic, payload, packet) => {
  emit('message', {
    topic,
    payload: payload.toString('utf8'),
    qos: packet.qos,
    retain: packet.retain,
    properties: packet.properties,
  });
});
client.on('packetsend', (packet) => {
  if (packet.cmd !== 'publish') return;
  const props = packet.properties || {};
  emit('sent', {
    topic: String(packet.topic),
    alias: props.topicAlias === undefined ? null : props.topicAlias,
    payload: String(packet.payload),
    message_id: packet.messageId === undefined ? null : packet.messageId,
  });
});
client.on('disconnect', (packet) => {
  emit('disconnect', { reason_code: packet.reasonCode, properties: packet.properties });
});
client.on('error', (err) => emit('error', { where: 'client', message: err.message, code: err.code }));
client.on('close', () => {
  emit('close', {});
  if (!isConnected) finish(1); // never connected, and no retry: the test fails at once
});

function subscribe(cmd) {
  const opts = { qos: cmd.qos || 0 };
  for (const flag of ['nl', 'rap', 'rh']) {
    if (cmd[flag] !== undefined) opts[flag] = cmd[flag];
  }
  return new Promise((resolve) => {
    client.subscribe(cmd.filter, opts, (err, granted) => {
      emit('suback', { filter: cmd.filter, granted, error: err ? err.message : null });
      resolve();
    });
  });
}

// Hands every message to MQTT.js at once (it pipelines them); acknowledgements come later as
// `puback` events, each naming its payload.
function publish(cmd) {
  const count = cmd.count === undefined ? 1 : cmd.count;
  for (let i = 0; i < count; i++) {
    const topic = numbered(cmd.topic, i);
    const payload = numbered(cmd.payload, i);
    const opts = { qos: cmd.qos || 0, retain: Boolean(cmd.retain) };
    if (cmd.properties) opts.properties = { ...cmd.properties };
    client.publish(topic, payload, opts, (err, ack) => {
      emit('puback', {
        topic,
        payload,
        reason_code: ack && ack.reasonCode !== undefined ? ack.reasonCode : 0,
        error: err ? err.message : null,
      });
    });
  }
}

function end() {
  return new Promise((resolve) => {
    client.end(false, {}, () => {
      finish(0);
      resolve();
    });
  });
}

async function handle(cmd) {
  await connected; // commands written before the CONNACK wait for it
  if (cmd.op === 'subscribe') return subscribe(cmd);
  if (cmd.op === 'publish') return publish(cmd);
  if (cmd.op === 'end') return end();
  throw new Error(`unknown op ${cmd.op}`);
}

serve(timeoutMs, handle, end);
