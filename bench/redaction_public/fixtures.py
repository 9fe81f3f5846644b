"""Secret-scanner test fixtures copied verbatim from public repositories (see README.md here for
sources, commits and licences). Each true positive names the value(s) that must disappear; each
false positive is text that must come back unchanged. Nothing here is a live credential: these are
the dummy strings the scanners' own unit tests use. Never edit a fixture to make memplane pass."""

from __future__ import annotations

import random
import string

# -- gitleaks cmd/generate/config/rules/generic.go @ 81fc668f (MIT) --------------------------------

GITLEAKS_GENERIC_TP = (  # (text, secret)
    ("'access_token': 'eyJ0eXAioiJKV1slS3oASx=='", "eyJ0eXAioiJKV1slS3oASx=="),
    ('"user_auth": "am9obmRvZTpkMDY5NGIxYi1jMTcxLTQ4ODYt+TMyYS0wMmUwOWQ1/mIwNjc="',
     "am9obmRvZTpkMDY5NGIxYi1jMTcxLTQ4ODYt+TMyYS0wMmUwOWQ1/mIwNjc="),
    ('"credentials" : "0afae57f3ccfd9d7f5767067bc48b30f719e271ba470488056e37ab35d4b6506"',
     "0afae57f3ccfd9d7f5767067bc48b30f719e271ba470488056e37ab35d4b6506"),
    ('"client_secret" : "6da89121079f83b2eb6acccf8219ea982c3d79bccc3e9c6a85856480661f8fde",',
     "6da89121079f83b2eb6acccf8219ea982c3d79bccc3e9c6a85856480661f8fde"),
    (' utils.GetEnvOrDefault("api_token", "dafa7817-e246-48f3-91a7-e87653d587b8")',
     "dafa7817-e246-48f3-91a7-e87653d587b8"),
)
# tps built by newPlausibleSecret(regex): a random value of the regex's shape with a digit 1-9
GITLEAKS_GENERIC_TP_TEMPLATES = (
    ('some_api_token_123 = "{}"', string.ascii_letters + string.digits, 60),
    ("creds = {}", string.ascii_letters + string.digits, 30),
    ("private-key: {}", string.ascii_letters + string.digits + "-_.=", 100),
    ("passwd = {}", string.ascii_letters + string.digits + "-_.=", 30),
    ("mySecretString={}", string.ascii_letters + string.digits, 30),
    ("todo_secret_do_not_commit = {}", string.ascii_letters + string.digits, 30),
)
GITLEAKS_GENERIC_FP = (
    '"accessor":"rA1wk0Y45YCufyfq",',
    "report_access_id: e8e4df51-2054-49b0-ab1c-516ac95c691d",
    'accessibilityYesOptionId = "0736f5ef-7e88-499a-80cc-90c85d2a5180"',
    "_RandomAccessIterator>\n_LIBCPP_CONSTEXPR_AFTER_CXX11 ",
    'this.ultraPictureBox1.Name = "ultraPictureBox1";',
    "rapidstring:marm64-uwp=fail",
    "event-bus-message-api:rc0.15.0_20231217_1420-SNAPSHOT'",
    "COMMUNICATION_API_VERSION=rc0.13.0_20230412_0712-SNAPSHOT",
    "MantleAPI_version=9a038989604e8da62ecddbe2094b16ce1b778be1",
    "[DEBUG]\t\torg.slf4j.slf4j-api:jar:1.7.8.:compile (version managed from default)",
    "[DEBUG]\t\torg.neo4j.neo4j-graphdb-api:jar:3.5.12:test",
    "apiUrl=apigee.corpint.com",
    'X-API-Name": "NRG0-Hermes-INTERNAL-API",',
    'author = "james.fake@ymail.com",',
    "X-MS-Exchange-Organization-AuthSource: sm02915.int.contoso.com",
    "Authentication-Results: 5h.ca.iphmx.com",
    "withCredentials([usernamePassword(credentialsId: '29f63271-dc2f-4734-8221-5b31b5169bac', "
    "usernameVariable: 'USERNAME', passwordVariable: 'PASSWORD')]) {",
    "credentialsId: 'ff083f76-7804-4ef1-80e4-fe975bb9141b'",
    "jobCredentialsId: 'f4aeb6bc-2a25-458a-8111-9be9e502c0e7'",
    '  "credentialId": "B9mTcFSck2LzJO2S3ols63",',
    'environment {\n\tCREDENTIALS_ID = "K8S_CRED"\n}',
    "dev.credentials.url=dev-lb1.api.f4ke.com:5215",
    'keyword: "Befaehigung_P2"',
    'public_key = "9Cnzj4p4WGeKLs1Pt8QuKUpRKfFLfRYC9AIKjbJTWit"',
    "pub const X509_pubkey_st = struct_X509_pubkey_st;",
    "|| pIdxKey->default_rc==0",
    "monkeys-audio:mx64-uwp=fail",
    '<entry key="jetbrains.mps.v8_elimination" value="executed" />',
    "minisat-master-keying:x64-uwp=fail",
    "IceSSL.KeyFile=s_rsa1024_priv.pem",
    '"bucket_key": "SalesResults-1.2"',
    '<key tag="SecurityIdentifier" name="SecurityIdentifier" type="STRING" />',
    "schemaKey = 'DOC_Vector_5_32'",
    'sequenceKey = "18"',
    "app.keystore.file=env/cert.p12",
    "-DKEYTAB_FILE=/tmp/app.keytab",
    "\tdoc.Security.KeySize = PdfEncryptionKeySize.Key128Bit;",
    "o.keySelector=n,o.haKey=!1,",
    '                                "key_name": "prod5zyxlmy-cmk",',
    '                                "kms_key_id": "555ea4a3-d53a-4412-9c66-3a7cb667b0d6",',
    '\t"key_vault_name": "web21prqodx24021",',
    "  keyVaultToStoreSecrets: cmp2-qat-1208358310",
    ',apiKey:"6fe4476ee5a1832882e326b506d14126",',
    'const validKeyChars = "0123456789abcdefghijklmnopqrstuvwxyz_-."',
    'const keyStr = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"',
    "key_length = XSalsa20.key_length",
    'pub const SN_id_Gost28147_89_None_KeyMeshing = "id-Gost28147-89-None-KeyMeshing"',
    "KeyPair = X25519.KeyPair",
    "BlindKeySignatures = Ed25519.BlindKeySignatures",
    'AVEncVideoMaxKeyframeDistance, "2987123a-ba93-4704-b489-ec1e5f25292c"',
    "            keyPressed = kVK_Return.u16",
    'timezone_mapping = {\n    "Turkey Standard Time": "Europe/Istanbul",\n}',
    "password combination.\n\nR5: Regulatory--21",
    "PuttyPassword=0",
    'LLM_SECRET_NAME = "NEXUS-GPT4-API-KEY"',
    "  <UserSecretsId>79a3edd0-2092-40a2-a04d-dcb46d5ca9ed</UserSecretsId>",
    "secret_length = X25519.secret_length",
    "secretSize must be >= XXH3_SECRET_SIZE_MIN",
    "# get build time secret for authentication\n#RUN --mount=type=secret,id=jfrog_secret \\\n"
    "#    JFROG_SECRET = $(cat /run/secrets/jfrog_secret) && \\",
    "    access_token_url='https://github.com/login/oauth/access_token',",
    'publicToken = "9Cnzj4p4WGeKLs1Pt8QuKUpRKfFLfRYC9AIKjbJTWit"',
    '<SourceFile SourceLocation="F:\\Extracts\\" TokenFile="RTL_INST_CODE.cer">',
    'notes            = "Maven - io.jsonwebtoken:jjwt-jackson-0.11.2"',
    "csrf-token=Mj2qykJO5rELyHgezQ69nzUX0i3OH67V7+V4eUrLfpuyOuxmiW9rhROG/Whikle15syazJOkrjJa3U2AbhIvUw==",
    'clientId = "73082700-1f09-405b-80d0-3131bfd6272d"',
    "GITHUB_API_KEY=\nDYNATRACE_API_KEY=",
    "snowflake.password=\njdbc.snowflake.url=",
    "import { chain_Anvil1_Key, chain_Anvil2_Key } from '../blockchain-tests/pallets/supported-chains/consts';",
    'SRCREV_moby = "43fc912ef59a83054ea7f6706df4d53a7dea4d80"',
    'LIC_FILES_CHKSUM = "file://${WORKDIR}/license.html;md5=5c94767cedb5d6987c902ac850ded2c6"',
)

# -- gitleaks cmd/generate/config/rules/curl.go @ a7e2844d (MIT) -----------------------------------

GITLEAKS_CURL_TP = (
    ("curl --cacert ca.crt -u elastic:P@ssw0rd$1 https://localhost:9200", "P@ssw0rd$1"),
    ("sh-5.0$ curl -k -X POST https://infinispan:11222/rest/v2/caches/default/hello \\\n  -H 'Content-type: text/plain'"
     " \\\n  -d 'world' \\\n  -u developer:yqDVtkqPECriaLRi", "yqDVtkqPECriaLRi"),
    ('curl -u ":d2LkV78zLx!t" https://localhost:9200', "d2LkV78zLx!t"),
    ('curl -u "d2LkV78zLx!t:" https://localhost:9200', "d2LkV78zLx!t"),
    ("curl -sw '%{http_code}' -X POST --user  'johns:h0pk1ns~21s' $GItHUB_API_URL/$GIT_COMMIT --data", "h0pk1ns~21s"),
    ("curl --user roger23@gmail.com:pQ9wTxu4Fg https://www.dropbox.com/cli_link?host_id=abcdefg -v", "pQ9wTxu4Fg"),
    ("curl -s --user 'api:d2LkV78zLx!t' \\\n    https://api.mailgun.net/v2/sandbox91d3515882ecfaa1c65be642.mailgun.org/messages",
     "d2LkV78zLx!t"),
    ('curl -s -v --user "j.smith:dB2yF6@qL9vZm1P#4J" "https://api.contoso.org/user/me"', "dB2yF6@qL9vZm1P#4J"),
    ("curl --user kevin:'pRf7vG2h1L8nQkW9' -iX PATCH -H \"Content-Type: application/json\" -d", "pRf7vG2h1L8nQkW9"),
    ("$ curl https://api.dropbox.com/oauth2/token \\\n  --user c28wlsosanujy2z:qgsnai0xokrw4j1 --data "
     "grant_type=authorization_code", "qgsnai0xokrw4j1"),
    ("curl --header  'Authorization:  5eb4223e-5008-46e5-be67-c7b8f2732305'", "5eb4223e-5008-46e5-be67-c7b8f2732305"),
    ("curl -k -X POST --header \"Authorization: Basic djJlNEpYa0NJUHZ5a2FWT0VRXzRqZmZUdDkwYTp2emNBZGFzZWpmlWZiUDc2VUJj"
     "NDNNVDExclVh\" \"https://api-qa.example.com:8243/token\" -d \"grant_type=client_credentials\"",
     "djJlNEpYa0NJUHZ5a2FWT0VRXzRqZmZUdDkwYTp2emNBZGFzZWpmlWZiUDc2VUJjNDNNVDExclVh"),
    ("curl -X POST -H \"Content-Type: application/json\" \\\n -H \"Authorization: Basic MzUzYjMwMmM0NDU3NGY1NjUwNDU2"
     "ODdlNTM0ZTdkNmE6Mjg2OTI0Njk3ZTYxNWE2NzJhNjQ2YTQ5MzU0NTY0NmM=\" \\\n  -d '{\"user\":{\"emailAddress\":\"test@exampl"
     "e.com\"}, \"password\":\"password\"}' \\\n  'http://localhost:8080/oauth2-provider/v1.0/users'",
     "MzUzYjMwMmM0NDU3NGY1NjUwNDU2ODdlNTM0ZTdkNmE6Mjg2OTI0Njk3ZTYxNWE2NzJhNjQ2YTQ5MzU0NTY0NmM="),
    ("#curl -X POST \\\n#  https://api.mailgun.net/v3/sandbox7dbcabccd4314c123e8b23599d35f5b6.mailgun.org/messages \\\n"
     "#  -H 'Authorization: Basic YXBpOmtleS1hN2MzNDJ3MzNhNWQxLTU2M2U3MjlwLTZhYjI3YzYzNzM0Ng==' \\\n"
     "#  -F from='Excited User <mailgun@sandbox7dbc123bccd4314c0aae8b23599d35f5b6.mailgun.org>' \\\n",
     "YXBpOmtleS1hN2MzNDJ3MzNhNWQxLTU2M2U3MjlwLTZhYjI3YzYzNzM0Ng=="),
    ('# curl -X GET "http://localhost:3000/api/cron/status" -H "Authorization: Bearer cfcabd11c7ed9a41b1a3e063c32d5114"',
     "cfcabd11c7ed9a41b1a3e063c32d5114"),
    ("curl https://api.openai.com/v1/chat/completions \\\n  -H \"Content-Type: application/json\" \\\n  -H \"Authorization: "
     "Bearer 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\" \\", "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"),
    ("curl -X GET \"https://api.cloudflare.com/client/v4/user/tokens/verify\" \\\n     -H \"Authorization: Bearer "
     "_FXNljbSRYMWx3TWrd7lgKhLtVZX6iskC8Wcbb4b\" \\\n     -H \"Content-Type:application/json\"",
     "_FXNljbSRYMWx3TWrd7lgKhLtVZX6iskC8Wcbb4b"),
    ('curl -H "Authorization: Bearer sha256~bRLFnzd59Z3XpZH5_seJPHALOuvbWiKwbFKSsoALkgp"',
     "sha256~bRLFnzd59Z3XpZH5_seJPHALOuvbWiKwbFKSsoALkgp"),
    ('curl -H "Authorization: Api-Token 22cb987851bc5659l29114c62e60c79abd0d2c08" --request PUT '
     "https://appsecclass.report/api/use/635", "22cb987851bc5659l29114c62e60c79abd0d2c08"),
    ('curl -H "Authorization: Token 22cb987851bc5659229114c62e60c79abd0d2c08" --request PUT '
     "https://appsecclass.report/api/use/635", "22cb987851bc5659229114c62e60c79abd0d2c08"),
    ('curl -L -H "Authorization:eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJjb25maWRlbmNlIjowLjh9.kvRPfjAhLhtRTczoRgctVGp7KY1Q'
     'VH3UBZM-gM0x8ec" service1.local -> correct jwt ',
     "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJjb25maWRlbmNlIjowLjh9.kvRPfjAhLhtRTczoRgctVGp7KY1QVH3UBZM-gM0x8ec"),
    ('curl -X GET \\\n     -H "apikey: c4ed6c21-9dd5-4a05-8e3f-c56d1151cce8" \\\n     -H "Accept: application/json" \\',
     "c4ed6c21-9dd5-4a05-8e3f-c56d1151cce8"),
    ('curl -X POST --header "Api-Token: Sk94HG7f6KB"', "Sk94HG7f6KB"),
    ('curl -XPOST http://localhost:8080/api/tasks -H "Content-Type: application/x-www-form-urlencoded; charset=UTF-8" '
     '-H "Token: 3fea6af1349166ea" -d "content=hello-curl"', "3fea6af1349166ea"),
    ('curl -X GET https://octopus.corp.net/\n     -H "X-Octopus-ApiKey: 3a16750d-d363-41a4-8ebd-035408f7730f" \\',
     "3a16750d-d363-41a4-8ebd-035408f7730f"),
)
GITLEAKS_CURL_FP = (
    "curl -i -u 'test:test'",
    '   curl -sL --user "$1:$2" "$3" > "$4"',
    "curl -u <user:password> https://test.com/endpoint",
    "curl --user neo4j:[PASSWORD] http://[IP]:7474/db/data/",
    'curl -u "myusername" http://localhost:15130/api/check_user/',
    "curl -u username:token",
    'curl -u "${_username}:${_password}"',
    'curl -u "${username}":"${password}"',
    'curl -k -X POST -I -u "SRVC_JENKINS:${APPID}"',
    'curl -u ":" https://localhost:9200',
    "curl -sw '%{http_code}' -X POST --user '$USERNAME:$PASSWORD' $GItHUB_API_URL/$GIT_COMMIT --data",
    'curl --user "xxx:yyy"',
    '           curl -sL --user "$GITHUB_USERNAME:$GITHUB_PASSWORD" "$GITHUB_URL" > "$TESTS_PATH"',
    'curl --silent --fail {{- if and $.Values.username $.Values.password }} --user '
    '"{{ $.Values.username }}:{{ $.Values.password }}"',
    'curl -XGET -i -u "${{ env.ELK_ID }}:${{ build.env.ELK_PASS }}"',
    'curl -XGET -i -u "${{needs.vault.outputs.account_id}}:${{needs.vault.outputs.account_password}}"',
    'curl -XGET -i -u "${{ steps.vault.outputs.account_id }}:${{ steps.vault.outputs.account_password }}"',
    'curl -X POST --user "$(cat ./login.txt):$(cat ./password.txt)"',
    "curl http://127.0.0.1:5000/file --user user:pass --digest        # digest auth",
    '   curl -X GET --insecure --user "username:password" \\',
    "curl --silent --insecure --user ${f5user}:${f5pass} \\",
    'curl https://example.com/micropub -d h=entry -d "content=Hello World" -H "Authorization: Bearer XXXXXXXXXXXX"',
    'curl -X POST https://accounts.spotify.com/api/token -d grant_type=client_credentials --header '
    '"Authorization: Basic ..."',
    'curl \\\n  -H "Authorization: Bearer <Openverse API token>" \\\n  "https://api.openverse.org/v1/audio/?q=test"',
    'curl -X GET \\\n     -H "apikey: $API_KEY" \\\n     -H "Accept: $FORMAT" \\\n'
    '"$API_URL/rest/v1/stats_derniere_labellisation"',
    '$ curl -X POST "http://localhost:8000/v1/chat/completions" \\\n    -H "Content-Type: application/json" \\\n'
    '    -H "Authorization: Bearer $API_KEY" \\',
    'curl -X GET -H "Content-Type: application/json" -H "Authorization: Bearer $(gcloud auth print-access-token)" '
    "https://workflowexecutions.googleapis.com/v1/projects/244283331594/locations/us-central1/workflows/sample-workflow/"
    "executions/43c925aa-514a-44c1-a0a4-a9f8f26fd2cb/callbacks/1705791f-d446-4e92-a6d0-a13622422e80_31864a51-8c13-4b03-"
    "ad4d-945cdc8d0631",
)

# -- gitleaks cmd/generate/config/rules/kubernetes.go @ a7e2844d (MIT) -----------------------------

GITLEAKS_KUBERNETES_TP = (
    ("apiVersion: v1\nkind: Secret\ndata:\n\tpassword: AAAAAAAAAAC7hjsA+H3owFygUv4w5B67lcSx14zff9FCPADiNbSwYWgE+O7Dhiy5"
     "tkRecs21ljjofvebe6xsYlA4cVmght0=", "AAAAAAAAAAC7hjsA+H3owFygUv4w5B67lcSx14zff9FCPADiNbSwYWgE+O7Dhiy5tkRecs21lj"
     "jofvebe6xsYlA4cVmght0="),
    ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: heketi-secret\n  namespace: default\ndata:\n  # base64 encoded "
     'password. E.g.: echo -n "mypassword" | base64\n  key: bXlwYXNzd29yZA==', "bXlwYXNzd29yZA=="),
    ("apiVersion: v1\ndata:\n\tpassword: UyFCXCpkJHpEc2I9\n\tusername: YWRtaW4=\nkind: Secret\nmetadata:\n\t"
     "creationTimestamp: '2022-06-28T17:44:13Z'\n\tname: db-user-pass\n\tnamespace: default\ntype: Opaque",
     "UyFCXCpkJHpEc2I9"),
    ("apiVersion: 'v1'\nkind: 'Secret'\ndata:\n\tpassword: 'UyFCXCpkJHpEc2I9'\n\tusername: 'YWRtaW4='\nmetadata:\n\t"
     "name: 'db-user-pass'\n\tnamespace: 'default'\ntype: 'Opaque'", "UyFCXCpkJHpEc2I9"),
    ('apiVersion: "v1"\ndata:\n\textra: "YWRtaW46cGFzc3dvcmQ="\nkind: "secret"\nmetadata:\n\tname: "secret-sa-sample"',
     "YWRtaW46cGFzc3dvcmQ="),
    ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: secret-dockercfg\ntype: kubernetes.io/dockercfg\ndata:\n"
     "  .dockercfg: |\n    eyJhdXRocyI6eyJodHRwczovL2V4YW1wbGUvdjEvIjp7ImF1dGgiOiJvcGVuc2VzYW1lIn19fQo=\n",
     "eyJhdXRocyI6eyJodHRwczovL2V4YW1wbGUvdjEvIjp7ImF1dGgiOiJvcGVuc2VzYW1lIn19fQo="),
    ("apiVersion: v1\ndata:\n  .dockercfg: >\n    eyJhdXRocyI6eyJodHRwczovL2V4YW1wbGUvdjEvIjp7ImF1dGgiOiJvcGVuc2VzYW1lIn19"
     "fQo=\nmetadata:\n  name: secret-dockercfg\ntype: kubernetes.io/dockercfg\nkind: Secret",
     "eyJhdXRocyI6eyJodHRwczovL2V4YW1wbGUvdjEvIjp7ImF1dGgiOiJvcGVuc2VzYW1lIn19fQo="),
)
GITLEAKS_KUBERNETES_FP = (
    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry-auth-data\ntype: Opaque\ndata:\n  htpasswd: ''\n",
    'apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry-auth-data\ntype: Opaque\ndata:\n  htpasswd: ""\n',
    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: registry-auth-data\ntype: Opaque\ndata:\n  htpasswd: {{ htpasswd }}\n",
    "apiVersion: external-secrets.io/v1beta1\nkind: ExternalSecret\nmetadata:\n  name: example\n  namespace: example-ns\n"
    "spec:\n  refreshInterval: 15s\n  secretStoreRef:\n    name: example\n    kind: SecretStore\n  target:\n    name: "
    "mysecret\n    creationPolicy: Owner\n  data:\n    - remoteRef:\n        conversionStrategy: Default\n        "
    "decodingStrategy: None\n        key: secret/mysecret\n        property: foo\n      secretKey: foo\n",
    "apiVersion: v1\n data:\n \tpassword: {{ .Values.Password }}\n kind: secret\n metadata:\n \tname: secret-sa-sample",
    "apiVersion: external-secrets.io/v1beta1\nkind: ExternalSecret\nmetadata:\n  name: api-key\n  namespace: "
    "my-namespace\nspec:\n  secretStoreRef:\n    kind: ClusterSecretStore\n    name: aws-secretsmanager\n  "
    "refreshInterval: 1h\n  target:\n    creationPolicy: Owner\n  data:\n    - secretKey: api-key\n      remoteRef:\n"
    "        key: my-secrets-manager-secret",
    "apiVersion: v1\nkind: Secret\nmetadata:\n  labels:\n    k8s-app: kubernetes-dashboard\n  name: "
    'kubernetes-dashboard-csrf\n  namespace: kubernetes-dashboard\ntype: Opaque\ndata:\n  csrf: ""\n',
)

# -- detect-secrets tests/plugins/keyword_test.py @ 0e8925d6 (Apache-2.0) ---------------------------
# The positives' secret is `m{{h}o)p${e]nob(ody[finds>-_$#thisone}}` in every case.

DS_KEYWORD_SECRET = "m{{h}o)p${e]nob(ody[finds>-_$#thisone}}"
DS_KEYWORD_TP = (
    'apikey := "m{{h}o)p${e]nob(ody[finds>-_$#thisone}}"',
    "apikey:='m{{h}o)p${e]nob(ody[finds>-_$#thisone}}'",
    "apikey := m{{h}o)p${e]nob(ody[finds>-_$#thisone}}",
    "'theapikey': 'm{{h}o)p${e]nob(ody[finds>-_$#thisone}}'",
    '"theapikey": "m{{h}o)p${e]nob(ody[finds>-_$#thisone}}"',
    'apikey: "m{{h}o)p${e]nob(ody[finds>-_$#thisone}}"',
    "apikey: m{{h}o)p${e]nob(ody[finds>-_$#thisone}}",
    "theapikey:m{{h}o)p${e]nob(ody[finds>-_$#thisone}}",
    'apikey = "m{{h}o)p${e]nob(ody[finds>-_$#thisone}}"',
    'apikey = @"m{{h}o)p${e]nob(ody[finds>-_$#thisone}}"',
    'apikey[]= "m{{h}o)p${e]nob(ody[finds>-_$#thisone}}"',
    'some_dict["secret"] = "m{{h}o)p${e]nob(ody[finds>-_$#thisone}}"',
    'the_password= "m{{h}o)p${e]nob(ody[finds>-_$#thisone}}"\n',
    "some_dict['secret'] = m{{h}o)p${e]nob(ody[finds>-_$#thisone}}",
    "my_password=m{{h}o)p${e]nob(ody[finds>-_$#thisone}}",
    "my_password = m{{h}o)p${e]nob(ody[finds>-_$#thisone}}",
    'apikey "m{{h}o)p${e]nob(ody[finds>-_$#thisone}}";',
    "private_key 'm{{h}o)p${e]nob(ody[finds>-_$#thisone}}';",
)
DS_KEYWORD_FP = (
    'theapikey := ""',
    'theapikey := "somefakekey"',
    'theapikey: ""',
    'theapikey: "somefakekey"',
    "password: ${link}",
    'theapikey[] = ""',
    'theapikey = @"somefakekey"',
    'my_password = ""',
    "my_password = ''",
    'my_password = "fakesecret"',
    'open(self, password = ""):',
    "my_password = foo(hey)you",
    "my_password = request.json_body['hey']",
    "my_password = True",
    "login(username=username, password=password)",
    'private_key "";',
    'private_key "fake";',
    'private_key "some/dir/aint/a/secret";',
    'private_key "${FOO}";',
    "apiKey: this.apiKey,",
    "apiKey: fs.readFileSync('foo',",
    "$password = $input;",
)


def plausible(rng: random.Random, alphabet: str, n: int) -> str:
    """gitleaks' newPlausibleSecret: a random value of the shape with at least one digit 1-9."""
    while True:
        s = "".join(rng.choice(alphabet) for _ in range(n))
        if any(c in "123456789" for c in s):
            return s


# -- measured once, after the look-alike list and the rules above were written; not tuned to --------

# gitleaks cmd/generate/config/rules/aws.go @ b35e7ea2 (MIT): tps are GenerateSampleSecrets of these
GITLEAKS_AWS_TP_IDS = ("AKIALALEMEL33243OLIB",)
GITLEAKS_AWS_FP = (
    "key = AKIAXXXXXXXXXXXXXXXX",
    "aws_access_key: AKIAIOSFODNN7EXAMPLE",
    'msgstr "Näytä asiakirjamallikansio."',
    "TODAYINASIAASACKOFRICEFELLOVER",
    "CTTCATAGGGTTCACGCTGTGTAAT-ACG--CCTGAGGC-CACA-AGGGGACTTCAGCAACCGTCGGG-GATTC-ATTGCCA-A--TGGAAGCAATC-TA-TGGGTTA-"
    "TCGCGGAGTCCGCAAAGACGGCCAGTATG-AAGCAGATTTCGCAC-CAATGTGACTGCATTTCGTG-ATCGGGGTAAGTA-TC-GCCGATTC-GC--CCGTCCA-AGT-",
)

# gitleaks cmd/generate/config/rules/jwt.go @ 1a23fa94 (MIT): literal tps (text, token)
_J1 = ("eyJhbGciOiJIUzI1NiJ9.eyJJc3N1ZXIiOiJJc3N1ZXIiLCJVc2VybmFtZSI6IkJhZFNlY3JldHMiLCJleHAiOjE1OTMxMzM0ODMsImlhdCI6"
       "MTQ2NjkwMzA4M30.ovqRikAo_0kKJ0GVrAwQlezymxrLGjcEiW_s3UJMMCo")
_J2 = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VybmFtZTpib2IifQ.HcfCW67Uda-0gz54ZWTqmtgJnZeNem0Q757eTa9EZuw"
_J3 = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJleHAiOjE1ODk1ODU1NjN9.PtfDS1niGoZ7pV6kplI-_q1fVKLnknQ3IwcrLZhoVCU"
_J4 = ("eyJhbGciOiJIUzUxMiIsImlhdCI6MTU3Njk5Njc5OSwiZXhwIjoxNTg0ODU5MTk5fQ.eyJ1aWQiOjQ1NzQyN30.0ei5UE6OgLBzN2_IS7xUIbIf"
       "W_S1Wzl42q2UeusbboxuzvctO_4Mz6YRr6f0PBLUVZMETxt8F0_4-yqIJ3_kUQ")
_J5 = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ1c2VyX2lkIjoiYTAwYzI3ZDEtYjVhYS00NjU0LWFmMTYtYjExNzNkZTY1NjI5Iiwicm9sZXMi"
       "OlsiYWRtaW4iXSwiaWF0IjoxNjA0NTE2OTIwLCJleHAiOjE2MDQ1MTc4MjAsImp0aSI6IjYzNmVmMDc0LTE2MzktNGJhZi1hNGNiLTQ4ZDM4NGMx"
       "MzliYSIsImlzcyI6Im15YXBwIn0.T9B0zG0AHShO5JfQgrMQBlToH33KHgp8nLMPFpN6QmM")
_J6 = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJyb2xlIjoiZ3Vlc3QiLCJzdWIiOiJZV3hwWTJVPSIsIm5iZiI6MTUxNDg1MTEzOSwiZXhwIjox"
       "NjQxMDgxNTM5fQ.K5DnnbbIOspRbpCr2IKXE9cPVatGOCBrBQobQmBmaeU")
GITLEAKS_JWT_TP = (
    (f"python examples/cli.py {_J1}", _J1),
    (f'"Authorization": "Bearer {_J2}"', _J2),
    (f'"value": "Bearer {_J3}",', _J3),
    (f"//                  authorization: '{_J4}',", _J4),
    (f'2020/11/04 21:08:40 Access Token:\n\t\t"{_J5}"', _J5),
    (f'"authorization": "Bearer {_J6}"', _J6),
)
