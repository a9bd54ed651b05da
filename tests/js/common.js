'use strict';
// What the client scripts share: `--name value` arguments, one JSON line per event on stdout,
// commands as JSON lines on stdin, and a hard deadline so that a script never outlives the
// test that started it (tests/test_js_clients.py).
//
// Commands come on stdin rather than all in the arguments so that the test decides when each
// step happens: it publishes only after the routers logged that they know the subscribers.

const readline = require('readline');

// `--port 1883 --id c1 --nl` -> {port: '1883', id: 'c1', nl: true}
function parseArgs(argv) {
  const args = {};
  for (let i = 0; i < argv.length; i++) {
    const key = argv[i];
    if (!key.startsWith('--')) throw new Error(`unexpected argument ${key}`);
    const name = key.slice(2);
    const next = argv[i + 1];
    if (next === undefined || next.startsWith('--')) {
      args[name] = true;
    } else {
      args[name] = next;
      i++;
    }
  }
  return args;
}

// On Linux a write to a pipe is synchronous, so a line emitted before process.exit is read.
function emit(event, fields) {
  process.stdout.write(JSON.stringify({ event, ...fields }, replacer) + '\n');
}

// Buffers (payloads, binary properties) as text: the tests send and compare text.
function replacer(key, value) {
  if (value && value.type === 'Buffer' && Array.isArray(value.data)) {
    return Buffer.from(value.data).toString('utf8');
  }
  if (typeof value === 'bigint') return value.toString();
  return value;
}

function finish(code) {
  emit('exit', { code });
  process.exit(code);
}

// Runs `handle(command)` for each JSON line on stdin (in order: the next waits until the
// previous one's promise settled); `onEnd()` when stdin closes; exits with code 3 after
// `timeoutMs` whatever happens.
function serve(timeoutMs, handle, onEnd) {
  setTimeout(() => {
    emit('timeout', { after_ms: timeoutMs });
    finish(3);
  }, timeoutMs);
  let chain = Promise.resolve();
  const lines = readline.createInterface({ input: process.stdin });
  lines.on('line', (line) => {
    if (!line.trim()) return;
    chain = chain.then(() => handle(JSON.parse(line))).catch((err) => {
      emit('error', { where: 'command', message: String(err && err.message ? err.message : err) });
    });
  });
  lines.on('close', () => {
    chain.then(onEnd);
  });
}

// `text` with every `{i}` replaced by `i`: a command can publish a numbered series.
function numbered(text, i) {
  return typeof text === 'string' ? text.split('{i}').join(String(i)) : text;
}

module.exports = { parseArgs, emit, finish, serve, numbered };
