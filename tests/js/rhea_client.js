'use strict';
// One rhea (AMQP 1.0) connection for tests/test_js_clients.py.
//
//   node rhea_client.js --port 5672 --container ID [--timeout-ms 30000]
//
// Commands on stdin, one JSON object a line:
//   {"op": "receiver", "name": "r1", "address": "jobs/#", "credit": 100,
//    "properties": {"exactmesh:shared-group": "g"}}      (link properties of the attach)
//   {"op": "receiver", "name": "replies", "dynamic": true}
//   {"op": "receiver", "name": "svc", "address": "svc/echo", "reply_with": "out"}
//        (a responder: each message is answered on sender `out`, to its reply_to, with body
//         "echo " + body and the request's correlation_id)
//   {"op": "sender", "name": "out", "address": null}      (null: the anonymous relay)
//   {"op": "send", "sender": "out", "count": 3,
//    "message": {"to": "x/{i}", "body": "m{i}", "reply_to": "...", "correlation_id": "c{i}"}}
//   {"op": "end"}                                          (close, then exit; so does EOF)
// Events on stdout: connection_open, receiver_open (with the address the router answered,
// a dynamic node's name), sender_open, message, outcome (accepted / rejected / released /
// modified, per message sent), link_error, error, disconnected, exit.

const rhea = require('rhea');
const { parseArgs, emit, finish, serve, numbered } = require('./common');

const args = parseArgs(process.argv.slice(2));
const timeoutMs = Number(args['timeout-ms'] || 30000);

const container = rhea.create_container({ id: args.container });
const senders = new Map(); // name -> {link, queue: [message]}
const opened = new Map(); // link name -> resolve() of its open command

const conn = container.connect({
  host: args.host || '127.0.0.1',
  port: Number(args.port),
  reconnect: false, // a test sees a lost connection as `disconnected`, never a silent retry
});

let isOpen = false;
const connectionOpen = new Promise((resolve) => {
  conn.once('connection_open', () => {
    isOpen = true;
    emit('connection_open', {});
    resolve();
  });
});

conn.on('disconnected', (ctx) => {
  emit('disconnected', { error: describe(ctx.error) });
  if (!isOpen) finish(1); // never connected, and no retry: the test fails at once
});
conn.on('connection_error', (ctx) => emit('error', { where: 'connection', message: describe(ctx.connection.error) }));

function describe(error) {
  if (!error) return null;
  if (error.condition) return `${error.condition}: ${error.description || ''}`;
  return String(error.message || error);
}

function linkOpened(name) {
  return new Promise((resolve) => opened.set(name, resolve));
}

function linkError(ctx) {
  const link = ctx.receiver || ctx.sender;
  emit('link_error', { name: link.name, error: describe(link.error) });
  const resolve = opened.get(link.name);
  if (resolve) resolve(); // the command is over either way; the test reads link_error
}

function openReceiver(cmd) {
  const source = cmd.dynamic ? { dynamic: true } : { address: cmd.address };
  const opts = { name: cmd.name, source, credit_window: cmd.credit || 100, autoaccept: true };
  if (cmd.properties) opts.properties = cmd.properties;
  const done = linkOpened(cmd.name);
  const receiver = conn.open_receiver(opts);
  receiver.on('receiver_open', (ctx) => {
    emit('receiver_open', { name: cmd.name, address: ctx.receiver.source.address });
    opened.get(cmd.name)();
  });
  receiver.on('receiver_error', linkError);
  receiver.on('message', (ctx) => onMessage(cmd, ctx.message));
  return done;
}

function onMessage(cmd, m) {
  emit('message', {
    receiver: cmd.name,
    body: m.body,
    to: m.to === undefined ? null : m.to,
    reply_to: m.reply_to === undefined ? null : m.reply_to,
    correlation_id: m.correlation_id === undefined ? null : m.correlation_id,
  });
  if (cmd.reply_with) {
    enqueue(cmd.reply_with, { to: m.reply_to, body: `echo ${m.body}`, correlation_id: m.correlation_id });
  }
}

function openSender(cmd) {
  // A target with no address is the anonymous relay (AMQP 3.5.4): each message names its
  // topic in `to`.
  const target = cmd.address ? { address: cmd.address } : {};
  const done = linkOpened(cmd.name);
  const link = conn.open_sender({ name: cmd.name, target, autosettle: true });
  const sender = { link, queue: [] };
  senders.set(cmd.name, sender);
  link.on('sender_open', (ctx) => {
    emit('sender_open', { name: cmd.name, address: ctx.sender.target ? ctx.sender.target.address : null });
    opened.get(cmd.name)();
  });
  link.on('sender_error', linkError);
  link.on('sendable', () => pump(sender));
  for (const state of ['accepted', 'rejected', 'released', 'modified']) {
    link.on(state, (ctx) => outcome(cmd.name, state, ctx.delivery));
  }
  return done;
}

function outcome(name, state, delivery) {
  const remote = delivery.remote_state || {};
  emit('outcome', {
    sender: name,
    label: delivery.label,
    state,
    error: describe(remote.error),
  });
}

function enqueue(name, message) {
  const sender = senders.get(name);
  if (!sender) throw new Error(`no sender ${name}`);
  sender.queue.push(message);
  pump(sender);
}

// rhea does not wait for credit itself: send only while the router gave some.
function pump(sender) {
  while (sender.queue.length && sender.link.sendable()) {
    const message = sender.queue.shift();
    const delivery = sender.link.send(message);
    delivery.label = message.body; // names the message in its `outcome` event
  }
}

function send(cmd) {
  const count = cmd.count === undefined ? 1 : cmd.count;
  for (let i = 0; i < count; i++) {
    const message = {};
    for (const [key, value] of Object.entries(cmd.message)) message[key] = numbered(value, i);
    enqueue(cmd.sender, message);
  }
}

function end() {
  if (!conn.is_open()) finish(0); // not connected (yet, or any more): nothing to close
  return new Promise((resolve) => {
    conn.once('connection_close', () => {
      finish(0);
      resolve();
    });
    conn.close();
  });
}

async function handle(cmd) {
  await connectionOpen;
  if (cmd.op === 'receiver') return openReceiver(cmd);
  if (cmd.op === 'sender') return openSender(cmd);
  if (cmd.op === 'send') return send(cmd);
  if (cmd.op === 'end') return end();
  throw new Error(`unknown op ${cmd.op}`);
}

serve(timeoutMs, handle, end);
