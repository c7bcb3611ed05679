"""Writes the fuzz targets' seed corpora: python3 tests/fuzz/seeds.py
tests/fuzz/corpus (the same files every time). Inputs that crashed a
target are added to corpus/<target>/ by hand, as crash_<what>."""
import gzip, json, os, struct, sys
root = sys.argv[1]
def put(t, name, data):
    d = os.path.join(root, t); os.makedirs(d, exist_ok=True)
    if isinstance(data, str): data = data.encode()
    open(os.path.join(d, name), 'wb').write(data)

# multipart: "<Content-Type>\n<body>"
ct = "multipart/form-data; boundary=XyZ\n"
put('multipart', 'two_parts', ct + '\x00--XyZ\r\nContent-Disposition: form-data; name="meta"\r\n\r\n{"name":"d"}\r\n--XyZ\r\nContent-Disposition: form-data; name="file"; filename="a.csv"\r\nContent-Type: text/csv\r\n\r\nx,y\r\n1,2\r\n--Xy not a boundary\r\n\r\r\n-\r\nx--XyZ\r\n--XyZ--\r\n')
put('multipart', 'split_1', ct + '\x01--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nv\r\n--XyZ--')
put('multipart', 'quoted_boundary', 'multipart/form-data; boundary="a b:c"; charset=utf-8\n\x07preamble\r\n--a b:c\r\nContent-Disposition: form-data; name="f"; filename="x\\"y.npy"\r\n\r\n\x93NUMPY\r\n--a b:c--\r\nepilogue')
put('multipart', 'no_close', ct + '\x05--XyZ\r\nContent-Disposition: form-data; name="e"\r\n\r\nabc')
put('multipart', 'garbage_after', 'multipart/form-data; boundary=b\n\x00--bXX')
put('multipart', 'long_header', 'multipart/form-data; boundary=b\n\x00--b\r\nContent-Disposition: form-data; name="' + 'n'*17000 + '"\r\n\r\nv\r\n--b--')
put('multipart', 'bad_type', 'text/plain; boundary=b\n--b--')

# CSV (label column "y"; first byte even: classification)
put('csv', 'classes', 'x,y\n1,3\n2,1\n3,3\n4,10\n')
put('csv', 'regression', 'a,b,y\n1.5e5,2,55\n-3,1,20.25\n')  # 'a' odd -> regression
put('csv', 'quoted_crlf_bom', '\ufeff"a","y","b ""q"""\r\n1,"say ""hi""",4\r\n5 ,  "two\nlines"  , 6\r\n\r\n')
put('csv', 'ragged', 'x,y\n1,a\n1,2,3\n')
put('csv', 'nan_inf', 'x,y\nNaN,a\n-inf,b\n1e39,c\n')
put('csv', 'no_label', 'a,b\n1,2\n')
put('csv', 'bad_utf8', 'x,y\n1,\xff\xfe\n'.encode('latin-1'))
put('csv', 'unterminated_quote', 'x,y\n1,"abc\n')
# text_csv: a byte (bit 0: learn a BPE; the rest: max_length - 1, mod 16)
# then the CSV, text column "text", label "y" (fuzz_text_csv.c)
put('text_csv', 'byte', b'\x0e' + 'id,text,y\n1,hello world,pos\n2,"a, b\nc",neg\n3,,pos\n4,h\u00e9llo \u20ac,neg\n'.encode())
put('text_csv', 'learn', b'\x09' + b'y,text\n1,the cat the cat\n2,the cat sat\n1,the the the\n')
put('text_csv', 'bad_utf8', b'\x02' + b'text,y\nok,1\nab\xc3(,2\n')
put('text_csv', 'no_text', b'\x02' + b'body,y\nok,1\n')
put('text_csv', 'ragged', b'\x03' + b'text,y\nok,1\nx\n')

# IDX: "<images>@@LABELS@@<labels>"
def idx3(n, r, c): return struct.pack('>IIII', 0x803, n, r, c) + bytes(range(n*r*c)) [:n*r*c] if n*r*c < 256 else struct.pack('>IIII', 0x803, n, r, c) + bytes(n*r*c)
def idx1(n): return struct.pack('>II', 0x801, n) + bytes(i % 10 for i in range(n))
SEP = b'@@LABELS@@'
put('idx', 'idx3', idx3(3, 2, 2) + SEP + idx1(3))
put('idx', 'idx3_gz', gzip.compress(idx3(3, 4, 4), mtime=0) + SEP + gzip.compress(idx1(3), mtime=0))
put('idx', 'idx2', struct.pack('>III', 0x802, 2, 3) + bytes(6) + SEP + idx1(2))
put('idx', 'idx4', struct.pack('>IIIII', 0x804, 1, 2, 2, 2) + bytes(8) + SEP + idx1(1))
put('idx', 'count_mismatch', idx3(3, 2, 2) + SEP + idx1(2))
put('idx', 'truncated', idx3(3, 2, 2)[:-3] + SEP + idx1(3))
put('idx', 'huge_dims', struct.pack('>IIII', 0x803, 0xffffffff, 0xffffffff, 0xffffffff) + SEP + idx1(1))
put('idx', 'gz_trailing', gzip.compress(idx3(1, 2, 2), mtime=0) + b'junk' + SEP + idx1(1))
put('idx', 'bad_type', struct.pack('>IIII', 0x0d03, 1, 1, 1) + b'\0\0\0\0' + SEP + idx1(1))

# NPY: "<x>@@Y@@<y>", last byte picks the task
def npy(descr, shape, data, fortran=False, ver=1):
    h = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, fortran, repr(tuple(shape)))
    pre = 10 if ver == 1 else 12
    pad = (64 - (pre + len(h) + 1) % 64) % 64
    h = h + ' ' * pad + '\n'
    if ver == 1: return b'\x93NUMPY\x01\x00' + struct.pack('<H', len(h)) + h.encode() + data
    return b'\x93NUMPY' + bytes([ver, 0]) + struct.pack('<I', len(h)) + h.encode() + data
YS = b'@@Y@@'
put('npy', 'f32_i64', npy('<f4', (2, 3), struct.pack('<6f', *range(6))) + YS + npy('<i8', (2,), struct.pack('<2q', 0, 1)) + b'\x01')
put('npy', 'u1_images', npy('|u1', (2, 1, 2, 2), bytes(8)) + YS + npy('<i4', (2,), struct.pack('<2i', 1, 0)) + b'\x00')
put('npy', 'f64_reg', npy('<f8', (2,), struct.pack('<2d', 1, 2), ver=2) + YS + npy('<f8', (2, 2), struct.pack('<4d', 1, 2, 3, 4), ver=3) + b'\x02')
put('npy', 'fortran', npy('<f4', (2, 2), bytes(16), fortran=True) + YS + npy('<i8', (2,), bytes(16)))
put('npy', 'big_endian', npy('>f4', (1, 1), bytes(4)) + YS + npy('<i8', (1,), bytes(8)))
put('npy', 'object', npy('|O', (1,), bytes(8)) + YS + npy('<i8', (1,), bytes(8)))
put('npy', 'nan', npy('<f4', (1, 1), struct.pack('<f', float('nan'))) + YS + npy('<i8', (1,), bytes(8)))
put('npy', 'huge_shape', npy('<f4', (2**62, 2**62), b'') + YS + npy('<i8', (1,), bytes(8)))
put('npy', 'bad_header', b'\x93NUMPY\x01\x00\x10\x00{"descr": 1    }' + YS)

# tokens: first byte even = text (the rest is the file); odd = tokens
# (3 bytes of vocab_size, little-endian, then an NPY or llm.c .bin file)
def vocab(v): return b'\x01' + struct.pack('<I', v)[:3]
def llmc_bin(magic, version, count, ids): return struct.pack('<3i', magic, version, count) + bytes(1012) + struct.pack('<%dH' % len(ids), *ids)
# tokenizer: "<tokenizer part>\0<text>" (fuzz_tokenizer.c)
def bytes_char(b):
    ok = lambda x: 33 <= x <= 126 or 0xA1 <= x <= 0xAC or 0xAE <= x <= 0xFF
    return chr(b) if ok(b) else chr(256 + sum(1 for x in range(b) if not ok(x)))
_tj = {"version": "1.0", "normalizer": None, "decoder": {"type": "ByteLevel"},
       "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
       "added_tokens": [{"id": 259, "content": "<|endoftext|>", "single_word": False,
                         "lstrip": False, "rstrip": True, "normalized": False, "special": True}],
       "model": {"type": "BPE", "dropout": None, "unk_token": None, "byte_fallback": False,
                 "vocab": dict([(bytes_char(b), b) for b in range(256)] +
                               [("he", 256), ("ll", 257), ("\u0120w", 258)]),
                 "merges": [["h", "e"], ["l", "l"], ["\u0120", "w"]]}}
TEXT = 'héllo world<|endoftext|> it\'s   12 \u3000😀\n\nhello'.encode()
put('tokenizer', 'hf_pairs', json.dumps(_tj).encode() + b'\x00' + TEXT)
_tj2 = json.loads(json.dumps(_tj)); _tj2["model"]["merges"] = ["h e", "l l", "\u0120 w"]
_tj2["pre_tokenizer"]["add_prefix_space"] = True
put('tokenizer', 'hf_strings_prefix', json.dumps(_tj2).encode() + b'\x00' + TEXT)
put('tokenizer', 'byte', b'byte\x00' + TEXT)
put('tokenizer', 'learn', b'{"type": "bpe", "vocab_size": 300}\x00' + TEXT * 3)
put('tokenizer', 'learned', b'{"type": "bpe", "vocab_size": 258, "merges": [[104, 101], [256, 108]]}\x00' + TEXT)
put('tokenizer', 'bad_utf8', b'byte\x00abc\xff')
put('tokenizer', 'wordpiece', b'{"model": {"type": "WordPiece", "vocab": {}}}')

put('tokens', 'text_utf8', b'\x00' + 'héllo wörld 😀\r\n'.encode())
put('tokens', 'text_bad_utf8', b'\x00abc\xe2\x82(\xed\xa0\x80\xf4\x90\x80\x80\xc0\xaf')
put('tokens', 'text_cut', b'\x00abc\xf0\x9f\x98')
put('tokens', 'text_empty', b'\x00')
put('tokens', 'bin', vocab(50257) + llmc_bin(20240520, 1, 3, [50256, 0, 7]))
put('tokens', 'bin_over_vocab', vocab(256) + llmc_bin(20240520, 1, 2, [1, 300]))
put('tokens', 'bin_count', vocab(256) + llmc_bin(20240520, 1, 9, [1, 2]))
put('tokens', 'bin_version', vocab(256) + llmc_bin(20240520, 2, 1, [1]))
put('tokens', 'npy_u2', vocab(65536) + npy('<u2', (3,), struct.pack('<3H', 1, 65535, 2)))
put('tokens', 'npy_i8_neg', vocab(10) + npy('<i8', (2,), struct.pack('<2q', 3, -1)))
put('tokens', 'npy_i4_2d', vocab(10) + npy('<i4', (1, 2), struct.pack('<2i', 3, 1)))
put('tokens', 'npy_f4', vocab(10) + npy('<f4', (1,), struct.pack('<f', 1)))

# safetensors
def st(tensors, meta=None, extra=b''):
    h = {}
    if meta is not None: h['__metadata__'] = meta
    off = 0; data = b''
    for name, dt, shape, raw in tensors:
        h[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(raw)]}
        off += len(raw); data += raw
    hb = json.dumps(h).encode()
    hb += b' ' * ((8 - len(hb) % 8) % 8)
    return struct.pack('<Q', len(hb)) + hb + data + extra
put('safetensors', 'two', st([('w', 'F32', [2, 2], bytes(16)), ('b', 'F32', [2], bytes(8))], {'format': 'pt', 'spec': '{}'}))
put('safetensors', 'dtypes', st([('a', 'F16', [1], bytes(2)), ('b', 'I64', [1, 1], bytes(8)), ('c', 'BOOL', [3], bytes(3)), ('d', 'U8', [0], b'')]))
put('safetensors', 'gap', struct.pack('<Q', 64) + b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}'.ljust(64) + bytes(8))
put('safetensors', 'overflow', struct.pack('<Q', 88) + b'{"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}}'.ljust(88))
put('safetensors', 'header_too_long', struct.pack('<Q', 2**63) + b'{}')
put('safetensors', 'not_object', struct.pack('<Q', 8) + b'[1,2,3] ')
put('safetensors', 'bad_meta', st([('w', 'F32', [1], bytes(4))], {'format': 5}))

# job specs (model, hyperparameters, resources, priority, and the dataset)
mlp = {'layers': [{'type': 'flatten'}, {'type': 'dense', 'units': 16}, {'type': 'relu'}, {'type': 'dropout', 'rate': 0.5}, {'type': 'dense', 'units': 10}]}
put('jobspec', 'mlp', json.dumps({'model': mlp, 'hyperparameters': {'epochs': 2, 'batch_size': 32, 'learning_rate': 0.01, 'optimizer': 'adam'}, 'resources': {'gpu': 'none'}, 'priority': 5}))
cnn = {'layers': [{'type': 'conv2d', 'filters': 4, 'kernel_size': 3, 'padding': 'same'}, {'type': 'batchnorm'}, {'type': 'relu'}, {'type': 'maxpool2d', 'pool_size': 2}, {'type': 'flatten'}, {'type': 'dense', 'units': 10}]}
put('jobspec', 'cnn_augment', json.dumps({'model': cnn, 'hyperparameters': {'augment': {'crop_padding': 2, 'horizontal_flip': True}, 'loss': 'cross_entropy', 'label_smoothing': 0.1, 'seed': 7}, 'resources': {'gpu': {'min_memory_gb': 8, 'min_compute_slices': 1}}}))
put('jobspec', 'regression_bce', json.dumps({'input_shape': [8], 'regression': False, 'outputs': 2, 'model': {'layers': [{'type': 'dense', 'units': 1}]}, 'hyperparameters': {'loss': 'binary_cross_entropy'}}))
put('jobspec', 'regression_huber', json.dumps({'input_shape': [4], 'regression': True, 'outputs': 3, 'model': {'layers': [{'type': 'dense', 'units': 3, 'activation': 'relu'}]}, 'hyperparameters': {'loss': 'huber', 'huber_delta': 0.5, 'precision': 'fp16'}}))
put('jobspec', 'huge_units', json.dumps({'model': {'layers': [{'type': 'flatten'}, {'type': 'dense', 'units': 2**40}, {'type': 'dense', 'units': 10}]}, 'hyperparameters': {'batch_size': -1, 'epochs': 1e308}}))
put('jobspec', 'bad_types', '{"model":{"layers":[{"type":"conv9"},3,null]},"hyperparameters":[],"resources":{"gpu":{"min_memory_gb":"x"}},"priority":1e99}')
put('jobspec', 'deep', '{"model":{"layers":' + '['*200 + ']'*200 + '}}')

# worker protocol lines
for name, line in [('started', {'event': 'started', 'pid': 12, 'cuda_visible_devices': '0', 'capabilities': {}}),
                   ('heartbeat', {'event': 'heartbeat'}),
                   ('progress', {'event': 'progress', 'epoch': 1, 'epochs': 2, 'step': 3, 'total_steps': 9, 'fraction': 0.3}),
                   ('epoch', {'event': 'epoch', 'epoch': 1, 'train_loss': 0.5, 'train_accuracy': 0.9, 'val_loss': None}),
                   ('preempted', {'event': 'preempted', 'epoch': None, 'step': None, 'checkpoint': False}),
                   ('error', {'event': 'error', 'message': 'x'}),
                   ('unknown', {'event': 'fly'})]:
    put('wproto', name, json.dumps(line) + '\n')
put('wproto', 'not_json', 'Traceback (most recent call last):\n')
put('wproto', 'event_not_string', '{"event": 5}')
put('wproto', 'array', '[{"event":"done"}]')

# Last-Event-ID
for name, v in [('zero', '0'), ('id', '42'), ('max', '9007199254740991'), ('over', '9007199254740992'),
                ('huge', '99999999999999999999999'), ('neg', '-1'), ('plus', '+1'), ('space', ' 1'),
                ('trailing', '1 '), ('hex', '0x10'), ('zeros', '0000012'), ('empty', '')]:
    put('last_event_id', name, v)

# predict bodies: first byte = features - 1
put('predict', 'flat', b'\x03' + json.dumps({'inputs': [[1, 2, 3, 4], [0.5, -1e3, 2e-7, 255]]}).encode())
put('predict', 'nested', b'\x03' + json.dumps({'inputs': [[[1, 2], [3, 4]], [[[1]], [[2]], [3, 4]]]}).encode())
put('predict', 'kserve', b'\x05' + json.dumps({'inputs': [{'name': 'input', 'datatype': 'FP32', 'shape': [1, 6], 'data': [1, 2, 3, 4, 5, 6]}]}).encode())
put('predict', 'too_many', b'\x00' + json.dumps({'inputs': [[1, 2, 3, [4, 5]]]}).encode())
put('predict', 'not_numbers', b'\x01' + json.dumps({'inputs': [[True, 'a'], [None], [{}]]}).encode())
put('predict', 'deep', b'\x01' + b'{"inputs":[' + b'['*20 + b'1' + b']'*20 + b']}')
put('predict', 'huge_float', b'\x01' + b'{"inputs":[[1e308,-1e308]]}')
put('predict', 'dup_key', b'\x01' + b'{"inputs":[[1,2]],"inputs":[[3]]}')

# serve flags, one per line
put('config_serve', 'defaults', '--listen\n127.0.0.1:8080\n--data\n./var')
put('config_serve', 'many', '--listen=[::1]:0\n--threads=4\n--max-upload-bytes=2G\n--max-json-bytes\n64M\n--fetch-hosts\nexample.com,*.x.org\n--fetch-timeout=30\n--model-cache=512M\n--devices=cpu\n--preempt=on\n--events-ring=1000')
put('config_serve', 'bad', '--listen\n[::1\n--threads=-1\n--max-upload-bytes=1Q')
put('config_serve', 'overflow', '--max-upload-bytes=99999999999999999999T\n--listen=host:99999')
put('config_serve', 'tls_half', '--tls-cert=/x\n--admin-key-file=' + 'a'*5000)
put('config_serve', 'help', '--help')
put('config_serve', 'no_value', '--listen')

# client config
put('cli_config', 'full', json.dumps({'url': 'https://h:8443', 'key': 'ty_abc', 'cacert': '/etc/ca.pem'}))
put('cli_config', 'long', json.dumps({'url': 'u'*5000, 'key': 'k'*300, 'cacert': 'c'*5000}))
put('cli_config', 'wrong_types', '{"url": 5, "key": null, "cacert": []}')
put('cli_config', 'not_json', 'url=http://x\n')
put('cli_config', 'key_file', '  ty_secretkey  \n\nsecond line\n')
put('cli_config', 'empty', '')
put('cli_config', 'nul', b'{"url":"a\\u0000b","key":"k"}')

# model import: "<metadata JSON>@@W@@<safetensors>" (the shape of
# tests/integration/test_api.c's import test)
W = b'@@W@@'
imp_meta = {'spec': {'layers': [{'type': 'dense', 'units': 5}, {'type': 'relu'}, {'type': 'dense', 'units': 3}]},
            'task': 'classification', 'input_shape': [4], 'classes': ['a', 'b', 'c'],
            'preprocess': {'kind': 'scale', 'factor': 0.5}}
f32 = lambda n: struct.pack('<%df' % n, *[(i % 7 - 3) / 8 for i in range(n)])
imp_t = [('0.weight', 'F32', [5, 4], f32(20)), ('0.bias', 'F32', [5], f32(5)),
         ('2.weight', 'F32', [3, 5], f32(15)), ('2.bias', 'F32', [3], f32(3)),
         ('1.num_batches_tracked', 'I64', [], struct.pack('<q', 7))]
put('model_import', 'state_dict', json.dumps(imp_meta).encode() + W + st(imp_t))
put('model_import', 'file_meta', W + st(imp_t[:4], {'spec': json.dumps(imp_meta['spec']), 'task': 'classification',
                                                    'input_shape': '[4]', 'classes': '["a","b","c"]', 'format': 'trainyard'}))
put('model_import', 'wrong_shape', json.dumps(imp_meta).encode() + W + st([('0.weight', 'F32', [5, 3], f32(15))] + imp_t[1:]))
put('model_import', 'f64_bias', json.dumps(imp_meta).encode() + W + st(imp_t[:3] + [('2.bias', 'F64', [3], bytes(24))]))
cnn_meta = {'spec': {'layers': [{'type': 'conv2d', 'filters': 2, 'kernel_size': 3}, {'type': 'batchnorm'}, {'type': 'relu'},
                               {'type': 'flatten'}, {'type': 'dense', 'units': 2}]},
            'task': 'regression', 'input_shape': [1, 4, 4], 'num_outputs': 2}
put('model_import', 'cnn_missing', json.dumps(cnn_meta).encode() + W + st([('0.weight', 'F32', [2, 1, 3, 3], f32(18))]))
put('model_import', 'bad_meta', b'{"spec": 1, "task": "x", "input_shape": [0]}' + W + st(imp_t))

# GPT-2 checkpoints in Hugging Face's layout: "<config.json>@@W@@<model.safetensors>"
# (fuzz_hf_gpt2.c): 1 layer, 4 channels, 2 heads, 3 positions, 5 tokens.
def gpt2_t(prefix='transformer.', dt='F32', size=4):
    C, R = 4, 16
    def t(name, shape):
        n = 1
        for s in shape: n *= s
        raw = f32(n) if dt == 'F32' else struct.pack('<%de' % n, *[(i % 7 - 3) / 8 for i in range(n)])
        return (prefix + name, dt, shape, raw)
    return [t('wte.weight', [5, C]), t('wpe.weight', [3, C]),
            t('h.0.ln_1.weight', [C]), t('h.0.ln_1.bias', [C]),
            t('h.0.attn.c_attn.weight', [C, 3 * C]), t('h.0.attn.c_attn.bias', [3 * C]),
            t('h.0.attn.c_proj.weight', [C, C]), t('h.0.attn.c_proj.bias', [C]),
            t('h.0.ln_2.weight', [C]), t('h.0.ln_2.bias', [C]),
            t('h.0.mlp.c_fc.weight', [C, R]), t('h.0.mlp.c_fc.bias', [R]),
            t('h.0.mlp.c_proj.weight', [R, C]), t('h.0.mlp.c_proj.bias', [C]),
            t('ln_f.weight', [C]), t('ln_f.bias', [C])]
gpt2_cfg = {'model_type': 'gpt2', 'n_embd': 4, 'n_head': 2, 'n_layer': 1, 'n_positions': 3,
            'vocab_size': 5, 'n_inner': None, 'activation_function': 'gelu_new',
            'layer_norm_epsilon': 1e-05}
put('hf_gpt2', 'gpt2', json.dumps(gpt2_cfg).encode() + W + st(gpt2_t(), {'format': 'pt'}))
put('hf_gpt2', 'bare_f16', json.dumps(gpt2_cfg).encode() + W + st(gpt2_t('', 'F16') +
    [('h.0.attn.bias', 'F32', [1, 1, 3, 3], f32(9)), ('lm_head.weight', 'F16', [5, 4], gpt2_t('', 'F16')[0][3])]))
put('hf_gpt2', 'untied', json.dumps(dict(gpt2_cfg, tie_word_embeddings=False)).encode() + W +
    st(gpt2_t() + [('lm_head.weight', 'F32', [5, 4], f32(20))]))
put('hf_gpt2', 'missing', json.dumps(gpt2_cfg).encode() + W + st(gpt2_t()[:-1]))
put('hf_gpt2', 'relu', json.dumps(dict(gpt2_cfg, activation_function='relu')).encode() + W + st(gpt2_t()))

# KServe v2 tensors: "<dtype><count><header fraction><body>" (fuzz_tensor.c)
hdr = json.dumps({"inputs": [{"name": "input", "shape": [1, 4], "datatype": "INT8", "parameters": {"binary_data_size": 4}}]}).encode()
body = hdr + bytes([1, 200, 3, 255])
put('tensor', 'binary_int8', bytes([5, 3, (len(hdr) * 255 + len(body) - 1) // len(body)]) + body)
put('tensor', 'json_fp16', bytes([9, 3, 254]) + json.dumps({"inputs": [{"name": "input", "shape": [2, 2], "datatype": "FP16", "data": [[0.1, 65504], [1e40, -0]]}]}).encode())
put('tensor', 'json_bool', bytes([0, 1, 254]) + b'{"inputs": [{"data": [true, false, 1]}], "parameters": {"binary_data_output": true}}')
put('tensor', 'gzip_json', bytes([11, 1, 255]) + gzip.compress(b'{"inputs": [{"data": [1.5, 2]}]}', mtime=0))
put('tensor', 'deflate_json', bytes([0x80 | 11, 1, 255]) + __import__('zlib').compress(b'{"inputs": [{"data": [1.5, 2]}]}'))

# Tabular raw rows: "<path><batch><body>" (fuzz_tabular.c; path 0 REST
# predict, 1 KServe JSON BYTES, 2 KServe binary BYTES; batch 1 + byte % 16)
put('tabular', 'rest_arrays', b'\x00\x00' + json.dumps({"inputs": [[41, True, "red"], [None, "no", ""], ["3.5", "YES", "purple"], ["", None, None]]}).encode())
put('tabular', 'rest_objects', b'\x00\x00' + json.dumps({"inputs": [{"age": 1e3, "color": "blue"}, {"member": False}, {"nope": 1}]}).encode())
put('tabular', 'rest_bad_cell', b'\x00\x00' + json.dumps({"inputs": [["abc", True, "red"], [1e39, 1, [2]]]}).encode())
put('tabular', 'kserve_json', b'\x01\x01' + json.dumps({"inputs": [{"name": "input", "shape": [2, 3], "datatype": "BYTES", "data": [["7", "true", "green"], [None, 1.5, ""]]}]}).encode())
def bytes_el(*cells): return b''.join(struct.pack('<I', len(c)) + c for c in cells)
put('tabular', 'kserve_binary', b'\x02\x01' + bytes_el(b'12', b'false', b'red', b'', b'yes', b'\xff\x00'))
put('tabular', 'kserve_binary_short', b'\x02\x00' + struct.pack('<I', 9) + b'1e5')

# a byte tokenizer's cut once split a character (fuzz_tokenizer)
put('tokenizer', 'crash_byte_cut', b'byte\x00h\xc3\xa9')

# Stop strings and token bytes: "<n % 5>(<len><stop>)*(<len><token>)*"
# (fuzz_stop.c)
def stop_in(stops, toks):
    b = bytes([len(stops)])
    for s in stops: b += bytes([len(s)]) + s
    for t in toks: b += bytes([len(t)]) + t
    return b
put('stop', 'split_three', stop_in([b'###END'], [b'Hello ', b'world#', b'##E', b'ND more']))
put('stop', 'false_start', stop_in([b'</s>', b'\n\n'], [b'a</', b'b<', b'/', b'</s', b'>x']))
put('stop', 'overlap', stop_in([b'abc', b'b', b'aab', b'c'], [b'xaa', b'ab', b'c']))
put('stop', 'utf8_cut', stop_in(['\u20ac\u20ac'.encode()], [b'1\xe2\x82', b'\xac\xe2', b'\x82', b'\xac']))
put('stop', 'invalid_bytes', stop_in([b'a\xef\xbf\xbd'], [b'\x80\xff\xc0\xaf', b'\xed\xa0\x80', b'xa', b'\xf0\x9f']))
put('stop', 'no_stops', stop_in([], [b'caf\xc3', b'\xa9 \xf0\x9f\x98', b'\x80']))

# Generation request bodies: Triton's generate and OpenAI's completions
# (fuzz_gen_body.c)
put('gen_body', 'triton', json.dumps({"text_input": "the old k", "parameters": {"max_tokens": 8, "temperature": 0.7, "top_k": 5, "top_p": 0.9, "seed": 3, "stop": ["\n", "."]}}))
put('gen_body', 'triton_bad', json.dumps({"text_input": 3, "parameters": {"top_p": 0}}))
put('gen_body', 'openai', json.dumps({"model": "gpt", "prompt": ["a", "b"], "n": 2, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}, "seed": 1, "stop": "x"}))
put('gen_body', 'openai_lp', json.dumps({"model": "gpt", "prompt": "a", "logprobs": 3, "echo": True, "presence_penalty": 0, "best_of": 1, "logit_bias": {}, "user": "u"}))
put('gen_body', 'openai_bad', json.dumps({"model": "gpt", "prompt": [1, 2], "frequency_penalty": 0.5}))
put('gen_body', 'openai_ids', json.dumps({"model": "gpt", "prompt": [[1, 2, 3], [4], [0, 65535]], "n": 2, "echo": True}))
