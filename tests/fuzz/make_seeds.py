#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/ (README.md).

The seeds are the valid and invalid inputs the unit and integration tests already use
(tests/unit/test_json_strict.c, test_csv.c, test_e164.c, test_apikey.c,
tests/integration/test_worker_events.c; the route bodies of test_api_calls.c and
test_api_batch_create.c are read from those files), so fuzzing starts from every branch those
tests reach.
Each seed is a file named <target>/<label>; the script rewrites a target's directory whole, so
run it after adding a seed here and commit the result:  python3 tests/fuzz/make_seeds.py
"""
import hashlib
import hmac
import os
import re
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
UUID = '0b6f3f4c-6c1e-4f3e-9d7a-2a4b1e5c7d90'
KEY = 'gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ'


def event(call_id='pc_1', key=UUID, status='answered', seq='2',
          when='"2024-05-01T12:00:00.250Z"', extra=''):
    parts = []
    if call_id is not None:
        parts.append(f'"call_id":"{call_id}"')
    if key is not None:
        parts.append(f'"idempotency_key":"{key}"')
    if status is not None:
        parts.append(f'"status":"{status}"')
    if seq is not None:
        parts.append(f'"sequence":{seq}')
    if when is not None:
        parts.append(f'"occurred_at":{when}')
    return ('{' + ','.join(parts) + extra + '}').encode()


def signed(body, secret=b'whsec_fuzz', t=b'1714564800'):
    """body behind a valid X-Signature line for the secret and clock of fuzz_events.c."""
    mac = hmac.new(secret, t + b'.' + body, hashlib.sha256).hexdigest().encode()
    return b't=' + t + b',v1=' + mac + b'\n' + body


C_STRING = re.compile(r'"((?:[^"\\\n]|\\.)*)"')


def c_bodies(test, first=(b'{', b'[')):
    """The JSON bodies written as C string literals in tests/integration/<test> (adjacent
    literals joined, escapes decoded): every literal run that starts with '{' or '['."""
    text = open(os.path.join(HERE, '..', 'integration', test), encoding='utf-8').read()
    out, run, last = [], None, None
    for m in C_STRING.finditer(text):
        joined = last is not None and text[last:m.start()].strip() == ''
        lit = m.group(1).encode().decode('unicode_escape').encode('latin-1')
        run = run + lit if joined and run is not None else lit
        if not joined and out and out[-1] is None:
            out.pop()
        if joined and out:
            out[-1] = run
        else:
            out.append(run)
        last = m.end()
    seen, bodies = set(), []
    for b in out:
        if b and b.lstrip()[:1] in first and b not in seen:
            seen.add(b)
            bodies.append(b)
    return bodies


# The csv target reads 4 bytes of parameters first (fuzz_csv.c): field limit, field count,
# record limit, chunk seed. 0x3f,0x0f,0xff: the roomiest limits; 0x01,0x02,0x03: tight ones
# (5-byte fields, 3 fields, 13-byte records) as in test_csv.c's limit tests.
ROOMY = b'\x3f\x0f\xff\x07'
TIGHT = b'\x01\x02\x03\x2a'

SEEDS = {
    'json_strict': [
        b' \t\r\n{"a":[1,2,{"b":"x"}],"c":null} \n',
        b'[1]', b'{"a":1}x', b'{"a":1} {}', b'1 2', b'{"a":1}\0', b'', b'{"a":}',
        b'{"a":"x\0y"}', b'{"a\0b":1}', b'{"a":"x\\u0000y"}', b'{"a":"x\ty"}',
        b'{"a":"\\u0001\\"u0000"}', b'{"a":1,"a":2}', b'{"x":{"b":1,"c":2,"b":3}}',
        b'{"contacts":[{"to":"1"},{"to":"1","to":"2"}]}', b'[{"a":1},{"a":1,"A":2}]',
        b'{"a":5,"b":5.5,"c":"5","d":null,"e":-0,"f":1e3,'
        b'"g":9007199254740992,"h":9007199254740994}',
        b'{' + b','.join(b'"k%d":%d' % (i, i) for i in range(20)) + b'}',
        b'{' + b','.join(b'"k%d":%d' % (i % 19, i) for i in range(20)) + b'}',
        b'{"a":"\\ud83d\\ude00","b":"\\u00e9"}',
        # Found by this target: control characters between tokens (test_json_strict.c).
        b'[1\x01\x00]', b'{\x00"a":"x\x00y"}',
        # The route bodies the lead adds (POST /v2/batches, POST /v2/calls).
        b'{"agent_id":"agent_7f2b91","to_number":"+919876543210"}',
        b'{"agent_id":"agent_7f2b91","to_number":"+919876543210","from_number":"+14155550100"}',
        b'{"campaign_id":"c1","contacts":[{"to_number":"+919876543210"},'
        b'{"to_number":"+14155550100","name":"Ann"}]}',
    ],
    'csv': [ROOMY + s for s in [
        b'phone,name\n+14155550100,Ann\n', b'a,b\r\nc,d\re,f',
        b'"a,b","say ""hi""","l1\r\nl2",""\n', b',a,, b ,\n', b'\n\nh\n\r\nx\n\n',
        b'h\n""\n', b'\xef\xbb\xbfh,"q"\n\xef\xbb\xbf\n', b'\xef\xbb\x80x\n',
        b'\xc3\xa9,\xe2\x82\xac,\xf0\x9f\x98\x80,\xf4\x8f\xbf\xbf\n', b'', b'\r\n\n',
        b'h\nok\n"x"y,z\n', b'h\na,"x" \n', b'h\nb\nc,"open\nmore\n', b'h\nab"c\n',
        b'h\nok\n\xc3\x28\n', b'h\n\x80\n', b'h\n\xc0\xaf\n', b'h\n\xe0\x80\xaf\n',
        b'h\n\xed\xa0\x80\n', b'h\n\xf4\x90\x80\x80\n', b'h\na,\xff\n', b'h\nx,\xe2\x82',
        b'h\n"a\nb",x\n"c"d\n', b'h\r"a\rb",x\r"c"d\r', b'h\nab\0c\n',
        b'phone\n+919876543210\n+1 (415) 555-0100\n+44 (0)20 7946 0958\n+0123456789\n'
        b'+1234567\n+123456789012345\n+1234567890123456\n+1\xc2\xa0415\n  +14155550100\t\n'
        b'+1  415 555 0100\n+1 (415 555-0100\n+1415555O100\n+\n',
        b'name,phone\nAnn,+1.415.555.0100\nBob,+1-415-555-0100\nCy,"+49 (30) 901820"\n',
    ]] + [TIGHT + s for s in [
        b'h\nabcdef\n', b'h\n"a""bcd"""\n', b'h\na,b,c,d\n', b'h\n,,,\n',
        b'h\n"abc","def","\n', b'h\nabcde,abcde,x\n', b'abcd\nabcde\n"a""bcd"\n',
        b'h\n"abc\ndef\n', b'h\nabcde,abcde,"x"\n',
    ]],
    'events': [
        event(), event(status='completed', seq='3'), event(when=None),
        event(when='null'), event(status='no-answer', when='"2024-05-01T12:00:00+02:00"'),
        event(key=UUID.upper(), status='canceled', when='"2024-02-29T23:59:60.123456789z"'),
        b'not json', b'[1,2]', b'{"call_id":"pc","status":"completed","sequence":1}',
        event(status='hungup', seq='1', when=None),
        event(status='completed', seq='1.5', when=None),
        event(status='completed', seq='1', when='"2024-02-30T10:00:00Z"'),
        event(key="x'); DROP TABLE calls;--", status='completed', seq='1', when=None),
        event(status='completed', seq='1', when=None) + b'xyz',
        event(status='completed', seq='1', when=None,
              extra=',"status":"ringing"'),
        event(key=UUID + '\\u0000x', status='completed', seq='1', when=None),
        event(call_id='x' * 129), event(seq='2147483648'), event(seq='-1'),
        event(when='"1969-12-31T23:59:59Z"'), event(when='"2024-05-01 12:00:00-23:59"'),
        # "<X-Signature>\n<body>" for the signature check (fuzz_events.c).
        b't=1714564800,v1=' + b'0' * 64 + b'\n' + event(),
        b't=1714564800,v1=zz,v1=' + b'a' * 64 + b'\n{}',
        b't=abc\n', b'v1=00\n' + event(),
        signed(event()),
        # A NUL between tokens once hid a NUL inside the key that follows (json_strict).
        b'{"call_id":"pc",\x00"idempotency_key":"' + UUID.encode() + b'\x00zz",'
        b'"status":"completed","sequence":1}',
    ],
    # POST /v2/calls (calls_body.h): the bodies of tests/integration/test_api_calls.c, and the
    # edges of calls_body_parse() (a 64-byte id and a 65-byte one, a null from_number).
    'calls_body': c_bodies('test_api_calls.c') + [
        b'{"agent_id":"' + b'a' * 64 + b'","to_number":"+14155550100","from_number":null}',
        b'{"agent_id":"' + b'a' * 65 + b'","to_number":"+14155550100"}',
        b'{"agent_id":"a_-Z9","to_number":"+44 (0)20 7946 0958","from_number":"+919876543210"}',
        b'{"agent_id":"x","to_number":"+14155550100","' + b'k' * 80 + b'":1}',
        b'{"agent_id":"ag\u00e9","to_number":"\u002b14155550100"}', b'"x"', b'null',
    ],
    # POST /v2/batches (batch_body.h): the bodies of tests/integration/test_api_batch_create.c,
    # and the edges of the first pass (33 fields, escaped keys, a long campaign_id and name).
    'batch_body': c_bodies('test_api_batch_create.c') + [
        b'{' + b','.join(b'"f%d":%d' % (i, i) for i in range(32)) + b'}',
        b'{' + b','.join(b'"f%d":%d' % (i, i) for i in range(33)) + b'}',
        b'{"camp\u0061ign_id":"c","contacts":[{"ph\u006fne":"+1\u0034155550100",'
        b'"variables":{"a":[1,{"b":"]}"}]}},{"phone":"+14155550101","variables":null}],'
        b'"name":null,"extra":{"x":[]}}',
        b'{"campaign_id":"' + b'c' * 300 + b'","name":"' + b'n' * 201 + b'","contacts":[]}',
        b'{"campaign_id":"c","name":"' + b'n' * 200 + b'","contacts":[' +
        b','.join(b'{"phone":"+1415555%04d"}' % i for i in range(12)) + b']}',
        b' \t\r\n{"campaign_id":"c","contacts":[{"phone":"+14155550100"}]} \n',
        b'{"campaign_id":"c","contacts":[{"phone":"x"}],"contacts":[]}',
        b'{"campaign_id":"c","contacts":[{"phone":"1"}]', b'{"campaign_id":"c","contacts":[{]}]}',
        # The number's other names (one per contact) and a name with control characters.
        b'{"campaign_id":"c","contacts":[{"to_number":"+14155550100"},'
        b'{"phone_numb\\u0065r":"+14155550101","variables":{"phone":"x"}}]}',
        b'{"campaign_id":"c","contacts":[{"phone":"+1","to_number":"+2"}]}',
        b'{"campaign_id":"c","name":"a\\nb\\u001b[31m","contacts":[]}',
    ],
    'bearer': [s.encode() if isinstance(s, str) else s for s in [
        'Bearer ' + KEY, 'bearer ' + KEY, 'BEARER   ' + KEY, ' \tBearer ' + KEY + ' \t',
        '', 'Bearer', 'Bearer ', 'Bearer\t' + KEY, 'Bearer' + KEY, 'Basic ' + KEY,
        'Token ' + KEY, KEY, 'Bearer ' + KEY[:-1], 'Bearer ' + KEY + 'R',
        'Bearer GAT_' + KEY[4:], 'Bearer xat_' + KEY[4:], 'Bearer ' + KEY[:-1] + '-',
        b'Bearer ' + KEY[:-3].encode() + b'\xc3\xa9P', 'Bearer ' + KEY + ' x',
        'Bearer ' + KEY + ',gat_x', 'Bearer ' + KEY + '\r\n', 'Bearer "' + KEY + '"',
        b'Bearer ' + KEY.encode() + b'\0', b'Bearer ' + KEY[:16].encode() + b'\0' +
        KEY[17:].encode(),
    ]],
}


def main() -> int:
    targets = sys.argv[1:] or sorted(SEEDS)
    for target in targets:
        d = os.path.join(HERE, 'corpus', target)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        for i, seed in enumerate(SEEDS[target]):
            name = f'seed{i:02d}-{hashlib.sha1(seed).hexdigest()[:8]}'
            with open(os.path.join(d, name), 'wb') as f:
                f.write(seed)
        print(f'{target}: {len(SEEDS[target])} seeds in {d}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
