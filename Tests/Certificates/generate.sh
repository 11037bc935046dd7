#!/bin/sh
# Regenerates the test certificates and expected.txt (the values computed by openssl, not by
# keychaind). Run from this directory; commit the output. Keys are test-only.
set -eu
days=36500
cfg=$(mktemp); trap 'rm -f "$cfg"' EXIT
# PrintableString where the characters allow it, so the normalization of names is exercised.
printf '[req]\ndistinguished_name=dn\nstring_mask=default\nprompt=no\n[dn]\n' > "$cfg"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out p256.key
openssl req -config "$cfg" -new -x509 -key p256.key -days $days -set_serial 0x00a1b2 \
    -subj "/O=Example  Org/CN=keychaind test  p256" -outform DER -out p256.der
openssl genpkey -algorithm ED25519 -out ed25519.key
openssl req -config "$cfg" -new -x509 -key ed25519.key -days $days -set_serial 0x0b \
    -subj "/CN=keychaind test ed25519" -addext "subjectAltName=DNS:ed.example" -outform DER -out ed25519.der
openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out rsa.key
openssl req -config "$cfg" -new -x509 -key rsa.key -days $days -set_serial 0x0c -subj "/O=No Common Name" \
    -addext "subjectAltName=email:rsa@example.org" -outform DER -out rsa.der
openssl x509 -inform DER -in p256.der -outform PEM -out p256.pem
hex() { od -An -v -tx1 | tr -d ' \n'; }
{
    for c in p256 ed25519 rsa; do
        spki=$(openssl x509 -inform DER -in $c.der -pubkey -noout | openssl pkey -pubin -outform DER | hex)
        case $c in
            p256) bits=$(printf %s "$spki" | tail -c 130) ;;
            ed25519) bits=$(printf %s "$spki" | tail -c 64) ;;
            rsa) bits=$(openssl x509 -inform DER -in rsa.der -pubkey -noout | openssl rsa -pubin -RSAPublicKey_out -outform DER 2>/dev/null | hex) ;;
        esac
        echo "$c.pkhh: $(printf %s "$bits" | xxd -r -p | openssl dgst -sha1 -binary | hex)"
        echo "$c.spkh: $(printf %s "$spki" | xxd -r -p | openssl dgst -sha256 -binary | hex)"
        # The INTEGER's content bytes: a leading 00 when the high bit is set (openssl prints none).
        serial=$(openssl x509 -inform DER -in $c.der -noout -serial | cut -d= -f2 | tr A-F a-f)
        [ $((${#serial} % 2)) = 1 ] && serial=0$serial
        case $serial in [89a-f]*) serial=00$serial ;; esac
        echo "$c.slnr: $serial"
        echo "$c.skid: $(openssl x509 -inform DER -in $c.der -noout -ext subjectKeyIdentifier | tail -1 | tr -d ' :' | tr A-F a-f)"
    done
    # The P-256 key as Apple's SecKeyCopyExternalRepresentation: 04 || X || Y || scalar.
    priv=$(openssl pkey -in p256.key -text -noout | awk '/^priv:/{p=1;next} /^pub:/{p=0} p' | tr -d ' :\n')
    pub=$(openssl pkey -in p256.key -text -noout | awk '/^pub:/{p=1;next} /^ASN1/{p=0} p' | tr -d ' :\n')
    echo "p256.private: $pub$(printf %064s "$priv" | tr ' ' 0 | tail -c 64)"
} > expected.txt
