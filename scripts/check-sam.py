#!/usr/bin/env python3
"""The AWS template as CloudFormation receives it: expanded by
aws-sam-translator (the transform `sam deploy` asks for), with the code
packaged as `sam package` leaves it, then checked against functions.toml:

- each function's role reads exactly the secrets it is given
  (`<NAME>_SECRET_ARN`), the host kubeconfig only the jobs and the host
  schedules, the HTTP functions' kubeconfig only the HTTP functions with
  `host`, the settings key and the mail server's URL only the functions
  whose `secrets` name them;
- memory, timeouts (a job's wait for a control plane ends before Lambda
  ends it), schedule names carrying the stack's name;
- reserved concurrency on every function, whose database connections
  (`DATABASE_MAX_CONNECTIONS` each) fit `DatabaseConnectionBudget`;
- admission served by a published version with provisioned concurrency;
- the alarms an operator needs.

Run with the test environment's Python (scripts/test.sh installs
aws-sam-translator there). `--self-test` plants mistakes and expects each
to be found.
"""
import copy
import logging
import os
import re
import sys
import tomllib

from samtranslator.translator.transform import transform
from samtranslator.yaml_helper import yaml_parse

logging.getLogger("samtranslator").setLevel(logging.ERROR)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kubebyon/{}"
REQUIRED = {
    "DatabaseUrlSecretArn": ARN.format("database-url"),
    "AmqpUrlSecretArn": ARN.format("amqp-url"),
    "HostKubeconfigSecretArn": ARN.format("host-kubeconfig"),
    "PublicBaseUrl": "https://kubebyon.example.com",
    "JoinBaseUrl": "https://kubebyon.example.com",
    "HostNodeAddress": "203.0.113.10",
    "BrokerArn": "arn:aws:mq:eu-west-1:123456789012:broker:kubebyon:b-1",
    "BrokerCredentialsSecretArn": ARN.format("broker"),
    "SubnetIds": "subnet-1,subnet-2",
    "SecurityGroupIds": "sg-1",
    "SecretsExtensionLayerArn": "arn:aws:lambda:eu-west-1:123456789012:layer:secrets:1",
}
# Every optional secret given too.
OPTIONAL = {
    "HostCredentialsKubeconfigSecretArn": ARN.format("host-credentials"),
    "SettingsKeySecretArn": ARN.format("settings-key"),
    "SmtpUrlSecretArn": ARN.format("smtp-url"),
}
PSEUDO = {"AWS::Region": "eu-west-1", "AWS::AccountId": "123456789012",
          "AWS::Partition": "aws", "AWS::StackName": "kubebyon", "AWS::URLSuffix": "amazonaws.com"}


def expand(text, given):
    """The template as CloudFormation gets it, and the parameter values."""
    template = yaml_parse(text)
    for name, resource in template["Resources"].items():
        if resource.get("Type") == "AWS::Serverless::Function":
            resource["Properties"]["CodeUri"] = f"s3://artifacts/{name}.zip"
    values = {name: p.get("Default") for name, p in template.get("Parameters", {}).items()}
    values.update(given)
    values.update(PSEUDO)
    os.environ.setdefault("AWS_DEFAULT_REGION", "eu-west-1")

    class NoManagedPolicies:
        def load(self):
            return {}

    return transform(copy.deepcopy(template), values, NoManagedPolicies()), values, template


class Resolver:
    """Refs to parameters, Fn::If on the template's conditions, Fn::Sub of
    parameters; what cannot be known here stays as it is."""

    def __init__(self, expanded, values):
        self.values = values
        self.conditions = expanded.get("Conditions", {})
        self.known = {}

    def condition(self, name):
        if name not in self.known:
            self.known[name] = bool(self.value(self.conditions[name]))
        return self.known[name]

    def value(self, node):
        if isinstance(node, list):
            return [v for v in (self.value(n) for n in node) if v is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            if key == "Ref":
                if arg == "AWS::NoValue":
                    return NO_VALUE
                return self.values.get(arg, node)
            if key == "Fn::If":
                return self.value(arg[1] if self.condition(arg[0]) else arg[2])
            if key == "Fn::Equals":
                a, b = self.value(arg[0]), self.value(arg[1])
                return a == b
            if key == "Fn::Not":
                return not self.value(arg[0])
            if key == "Fn::And":
                return all(self.value(a) for a in arg)
            if key == "Fn::Or":
                return any(self.value(a) for a in arg)
            if key == "Condition":
                return self.condition(arg)
            if key == "Fn::Sub" and isinstance(arg, str):
                return re.sub(r"\$\{([A-Za-z0-9:]+)\}", lambda m: str(self.values.get(m.group(1), m.group(0))), arg)
        return {k: self.value(v) for k, v in node.items() if self.value(v) is not NO_VALUE}


NO_VALUE = object()


def as_list(value):
    return value if isinstance(value, list) else [value]


def readable_secrets(expanded, resolve, role):
    """The secret ARNs a role may GetSecretValue, through its managed
    policies (the template's own) and inline policies."""
    properties = expanded["Resources"][role]["Properties"]
    documents = [p["PolicyDocument"] for p in properties.get("Policies", [])]
    for arn in properties.get("ManagedPolicyArns", []):
        arn = resolve.value(arn)  # an Fn::If on the stack's conditions
        if isinstance(arn, dict) and "Ref" in arn and arn["Ref"] in expanded["Resources"]:
            documents.append(expanded["Resources"][arn["Ref"]]["Properties"]["PolicyDocument"])
    arns = set()
    for document in documents:
        for statement in as_list(resolve.value(document).get("Statement", [])):
            actions = as_list(statement.get("Action", []))
            if statement.get("Effect") == "Allow" and "secretsmanager:GetSecretValue" in actions:
                arns.update(a for a in as_list(statement.get("Resource", [])) if isinstance(a, str))
    return arns


def check(text, manifest, given):
    problems = []
    say = problems.append
    expanded, values, template = expand(text, given)
    resolve = Resolver(expanded, values)
    resources = expanded["Resources"]
    binaries = {name: r["Metadata"]["BuildProperties"]["Binary"]
                for name, r in template["Resources"].items()
                if r.get("Type") == "AWS::Serverless::Function"}
    globals_env = template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    connections = int(resolve.value(globals_env.get("DATABASE_MAX_CONNECTIONS", 3)))
    host_arn = values["HostKubeconfigSecretArn"]
    credentials_arn = values.get("HostCredentialsKubeconfigSecretArn") or host_arn
    reserved_total = 0
    for name, binary in sorted(binaries.items()):
        f = manifest.get(binary, {})
        function = resources.get(name)
        if not function or function["Type"] != "AWS::Lambda::Function":
            say(f"{name}: not expanded into an AWS::Lambda::Function")
            continue
        properties = resolve.value(function["Properties"])
        role = function["Properties"]["Role"]["Fn::GetAtt"][0]
        readable = readable_secrets(expanded, resolve, role)
        env = properties.get("Environment", {}).get("Variables", {})
        for variable, arn in sorted(env.items()):
            if variable.endswith("_SECRET_ARN") and arn not in readable:
                say(f"{binary} is given {variable} but its role cannot read it")
        jobs = f.get("kind") == "job" or (f.get("kind") == "schedule" and f.get("host"))
        credentials = f.get("kind") == "http" and f.get("host")
        if (host_arn in readable) != bool(jobs or (credentials and credentials_arn == host_arn)):
            say(f"{binary} {'can' if host_arn in readable else 'cannot'} read the host kubeconfig")
        if credentials_arn != host_arn and (credentials_arn in readable) != bool(credentials):
            say(f"{binary} {'can' if credentials_arn in readable else 'cannot'} read the HTTP functions' kubeconfig")
        for secret, parameter in (("settings_key", "SettingsKeySecretArn"), ("smtp", "SmtpUrlSecretArn")):
            arn = values.get(parameter)
            if arn and (arn in readable) != (secret in f.get("secrets", [])):
                say(f"{binary} {'can' if arn in readable else 'cannot'} read {parameter}; "
                    f"functions.toml's secrets: {f.get('secrets', [])}")
        if properties.get("MemorySize") != f.get("memory", 128):
            say(f"{binary} has {properties.get('MemorySize')} MB; functions.toml says {f.get('memory', 128)}")
        if f.get("kind") == "job":
            ready = int(env.get("KUBEBYON_CONTROL_PLANE_READY_TIMEOUT_MS", 900000))
            if ready > (int(properties["Timeout"]) - 120) * 1000:
                say(f"{binary}: the control-plane wait ({ready} ms) leaves no room in its {properties['Timeout']} s")
        reserved = properties.get("ReservedConcurrentExecutions")
        if not isinstance(reserved, int) or reserved < 1:
            say(f"{binary} has no reserved concurrency (an unbounded scale-out exhausts the database)")
        else:
            reserved_total += reserved
    budget = int(values.get("DatabaseConnectionBudget") or 0)
    if reserved_total * connections > budget:
        say(f"reserved concurrency {reserved_total} x {connections} connections exceeds DatabaseConnectionBudget {budget}")

    schedules = [r for r in resources.values() if r["Type"] == "AWS::Scheduler::Schedule"]
    for schedule in schedules:
        name = resolve.value(schedule["Properties"].get("Name"))
        if not isinstance(name, str) or not name.startswith(f"{PSEUDO['AWS::StackName']}-"):
            say(f"a schedule is named {name!r}, not after the stack")

    # Admission: a published version kept warm, and the API calls that alias.
    admission = next((n for n, b in binaries.items() if b == "admission"), None)
    aliases = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Alias"
               and r["Properties"].get("FunctionName", {}).get("Ref") == admission]
    if not aliases or not resolve.value(aliases[0]["Properties"].get("ProvisionedConcurrencyConfig", {})).get(
            "ProvisionedConcurrentExecutions"):
        say("admission has no alias with provisioned concurrency (a cold start refuses tenants' deploys)")
    alarms = {r["Properties"].get("MetricName") for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"}
    for metric in ["Errors", "Throttles", "5xx", "DatabaseConnections", "MessageCount"]:
        if metric not in alarms:
            say(f"no alarm on {metric}")
    return problems


def main():
    manifest = tomllib.loads(open(os.path.join(ROOT, "functions.toml")).read())
    text = open(os.path.join(ROOT, "infra/aws/template.yaml")).read()
    if sys.argv[1:] == ["--self-test"]:
        def after(anchor, old, new):
            at = text.index(anchor)
            assert old in text[at:], old
            return text[:at] + text[at:].replace(old, new, 1)
        planted = [
            (after("Binary: join\n", "        - !Ref ReadCredentialsKubeconfig\n", "        - !Ref ReadHostKubeconfig\n"),
             "join can read the host kubeconfig"),
            (after("Binary: sync-nodes\n", ", !Ref ReadHostKubeconfig]", "]"),
             "sync-nodes is given KUBEBYON_HOST_KUBECONFIG_SECRET_ARN but its role cannot read it"),
            (after("Binary: console\n", "        - !Ref ReadSecrets\n",
                   "        - !Ref ReadSecrets\n        - !If [HasSmtp, !Ref ReadSmtp, !Ref AWS::NoValue]\n"),
             "console can read SmtpUrlSecretArn"),
            (after("Binary: job-cluster-create\n", "MemorySize: 512", "MemorySize: 256"),
             "job-cluster-create has 256 MB"),
            (after("Binary: api-auth\n", "ReservedConcurrentExecutions: 10", "ReservedConcurrentExecutions: 100"),
             "exceeds DatabaseConnectionBudget 250"),
            (after("Binary: admission\n", "      AutoPublishAlias: live\n      ProvisionedConcurrencyConfig:\n"
                   "        ProvisionedConcurrentExecutions: !Ref AdmissionProvisionedConcurrency\n", ""),
             "admission has no alias with provisioned concurrency"),
            (after("  BrokerDepthAlarm:\n", "MetricName: MessageCount", "MetricName: MessageCountGone"),
             "no alarm on MessageCount"),
        ]
        missing = []
        for planted_text, expected in planted:
            try:
                found = check(planted_text, manifest, {**REQUIRED, **OPTIONAL})
            except Exception as error:  # a plant SAM itself refuses
                found = [str(error)]
            if not any(expected in p for p in found):
                missing.append(f"{expected!r} not found in {found}")
        if missing:
            print("check-sam self-test failed:\n" + "\n".join(missing), file=sys.stderr)
            sys.exit(1)
        print("check-sam self-test: planted mistakes caught")
        return
    problems = []
    for given in (REQUIRED, {**REQUIRED, **OPTIONAL}):
        problems += check(text, manifest, given)
    if problems:
        print("infra/aws/template.yaml, expanded:\n  " + "\n  ".join(sorted(set(problems))), file=sys.stderr)
        sys.exit(1)
    print("infra/aws/template.yaml: expanded by aws-sam-translator, every function's role, memory, "
          "timeout, concurrency and the alarms agree with functions.toml")


if __name__ == "__main__":
    main()
