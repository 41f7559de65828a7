{{/* The chart name, or nameOverride. */}}
{{- define "kube-dra-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The fullname: fullnameOverride, the release name when it holds the name, else <release>-<name>. */}}
{{- define "kube-dra-exporter.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Cluster-scoped objects carry the namespace too, so releases in two namespaces do not collide. */}}
{{- define "kube-dra-exporter.clusterName" -}}
{{- printf "%s-%s" (include "kube-dra-exporter.namespace" .) (include "kube-dra-exporter.fullname" .) | trunc 253 | trimSuffix "-" -}}
{{- end -}}

{{- define "kube-dra-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "kube-dra-exporter.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "kube-dra-exporter.chartName" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kube-dra-exporter.namespace" -}}
{{- default .Release.Namespace .Values.namespace -}}
{{- end -}}

{{/* The exporter's HTTP port (the image listens on tcp:8080). */}}
{{- define "kube-dra-exporter.port" -}}
{{ .Values.exporter.port }}
{{- end -}}

{{/* Labels on every object and on the pod. */}}
{{- define "kube-dra-exporter.labels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ include "kube-dra-exporter.chartName" . }}
{{- with .Values.global.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* What selects the exporter's pods: Deployment, Service, PDB, NetworkPolicy, monitors. */}}
{{- define "kube-dra-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kube-dra-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: "main"
{{- end -}}

{{/* The selector labels, the plain app label and the common labels: every object has these. */}}
{{- define "kube-dra-exporter.objectLabels" -}}
app: {{ include "kube-dra-exporter.name" . }}
{{ include "kube-dra-exporter.selectorLabels" . }}
{{ include "kube-dra-exporter.labels" . }}
{{- end -}}

{{/*
The image reference from (tuple image imageRegistry imageNamespace defaultTag):
image.repository, or [registry/][namespace/]name; then :tag@digest, :tag, @digest or :defaultTag.
*/}}
{{- define "kube-dra-exporter.image" -}}
{{- if ne (len .) 4 -}}
{{- fail (printf "ERROR: template \"kube-dra-exporter.image\" expects (tuple .Values.image .Values.imageRegistry .Values.imageNamespace \"default-tag\"), got %d arguments" (len .)) -}}
{{- end -}}
{{- $image := index . 0 -}}
{{- $registry := index . 1 -}}
{{- $namespace := index . 2 -}}
{{- $defaultTag := index . 3 -}}
{{- $repository := $image.repository -}}
{{- if not $repository -}}
{{- if not $image.name -}}
{{- fail "ERROR: image.name must be set when image.repository is empty" -}}
{{- end -}}
{{- $repository = $image.name -}}
{{- if $namespace -}}{{- $repository = printf "%s/%s" $namespace $repository -}}{{- end -}}
{{- if $registry -}}{{- $repository = printf "%s/%s" $registry $repository -}}{{- end -}}
{{- end -}}
{{- if and $image.tag $image.digest -}}
{{- printf "%s:%s@%s" $repository $image.tag $image.digest -}}
{{- else if $image.tag -}}
{{- printf "%s:%s" $repository $image.tag -}}
{{- else if $image.digest -}}
{{- printf "%s@%s" $repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository $defaultTag -}}
{{- end -}}
{{- end -}}

{{/* The exporter's command-line arguments, from .Values.exporter and .Values.extraArgs. */}}
{{/*
The resources listed, comma-separated: exporter.resources, and devicetaintrules when
exporter.deviceTaintRules is true, or auto and the API serves them.
*/}}
{{- define "kube-dra-exporter.resources" -}}
{{- $e := .Values.exporter -}}
{{- $resources := $e.resources -}}
{{- $served := or (.Capabilities.APIVersions.Has "resource.k8s.io/v1/DeviceTaintRule") (.Capabilities.APIVersions.Has "resource.k8s.io/v1beta2/DeviceTaintRule") -}}
{{- $wanted := or (eq (toString $e.deviceTaintRules) "true") (and (eq (toString $e.deviceTaintRules) "auto") $served) -}}
{{- if and $wanted (not (has "devicetaintrules" $resources)) -}}
{{- $resources = append $resources "devicetaintrules" -}}
{{- end -}}
{{- join "," $resources -}}
{{- end -}}

{{- define "kube-dra-exporter.args" -}}
{{- $e := .Values.exporter -}}
{{- include "kube-dra-exporter.refusals" . -}}
- {{ printf "--listen=:%v" $e.port | quote }}
- {{ printf "--telemetry-listen=:%v" $e.telemetryPort | quote }}
- {{ printf "--log-level=%s" $e.logLevel | quote }}
- {{ printf "--log-format=%s" $e.logFormat | quote }}
- {{ printf "--max-response-bytes=%s" (include "kube-dra-exporter.maxResponseBytes" .) | quote }}
- {{ printf "--mode=%s" $e.mode | quote }}
{{- if eq $e.mode "watch" }}
- {{ printf "--max-staleness=%v" $e.maxStaleness | quote }}
{{- end }}
{{- if .Values.sharding.enabled }}
- "--pod=$(POD_NAME)"
- {{ printf "--total-shards=%d" (int64 .Values.sharding.replicas) | quote }}
{{- end }}
- {{ printf "--timeout=%v" $e.timeout | quote }}
- {{ printf "--page-size=%d" (int64 $e.pageSize) | quote }}
- {{ printf "--resources=%s" (include "kube-dra-exporter.resources" .) | quote }}
{{- with $e.metricAllowlist }}
- {{ printf "--metric-allowlist=%s" (join "," .) | quote }}
{{- end }}
{{- with $e.metricDenylist }}
- {{ printf "--metric-denylist=%s" (join "," .) | quote }}
{{- end }}
{{- with $e.metricOptInList }}
- {{ printf "--metric-opt-in-list=%s" (join "," .) | quote }}
{{- end }}
{{- with $e.deviceAttributes }}
- {{ printf "--device-attributes=%s" (join "," .) | quote }}
{{- end }}
{{- with $e.claimDeviceData }}
- {{ printf "--claim-device-data=%s" (join "," .) | quote }}
{{- end }}
{{- with $e.hidesAllocatedDevices }}
- {{ printf "--hides-allocated-devices=%s" (join "," .) | quote }}
{{- end }}
{{- with $e.metricLabelsAllowlist }}
- {{ printf "--metric-labels-allowlist=%s" (join "," .) | quote }}
{{- end }}
{{- with $e.metricAnnotationsAllowlist }}
- {{ printf "--metric-annotations-allowlist=%s" (join "," .) | quote }}
{{- end }}
{{- with $e.deviceCapacities }}
- {{ printf "--device-capacities=%s" . | quote }}
{{- end }}
- {{ printf "--cost-share-capacity=%s" $e.costShareCapacity | quote }}
{{- range $e.expectPools }}
- {{ printf "--expect-pools=%s" . | quote }}
{{- end }}
{{- if .Values.authFilter.enabled }}
- "--auth-filter"
{{- with .Values.authFilter.tokenAudiences }}
- {{ printf "--auth-token-audiences=%s" (join "," .) | quote }}
{{- end }}
- {{ printf "--auth-allowed-ttl=%v" .Values.authFilter.allowedTTL | quote }}
{{- end }}
{{- if .Values.tls.enabled }}
- "--tls-config=/etc/kdraexp/web/web-config.yml"
{{- if include "kube-dra-exporter.probeListener" . }}
- {{ printf "--probe-listen=:%v" .Values.tls.probePort | quote }}
{{- end }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}

{{/* The job of the exporter's series: prometheusRule.job, else the name the monitors give it. */}}
{{- define "kube-dra-exporter.job" -}}
{{- .Values.prometheusRule.job | default (include "kube-dra-exporter.name" .) -}}
{{- end -}}

{{/* Where the alerts' runbooks are: prometheusRule.runbookURL, else this release's docs. */}}
{{- define "kube-dra-exporter.runbookURL" -}}
{{- .Values.prometheusRule.runbookURL | default (printf "https://github.com/gradiant/kube-dra-exporter/blob/v%s/docs/alerts.md" .Chart.AppVersion) -}}
{{- end -}}

{{/*
One alerting rule, when prometheusRule.alerts.<name>.enabled: (list $rule name expr summary
description). Its runbook is the section of docs/alerts.md named after it.
*/}}
{{- define "kube-dra-exporter.alert" -}}
{{- $rule := index . 0 -}}
{{- $name := index . 1 -}}
{{- $alert := index $rule.alerts $name -}}
{{- if $alert.enabled -}}
- alert: {{ $name }}
  expr: |
    {{- index . 2 | nindent 4 }}
  for: {{ $alert.for }}
  labels:
    severity: {{ $alert.severity }}
    {{- with $alert.additionalLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    summary: {{ index . 3 | quote }}
    description: {{ index . 4 | quote }}
    runbook_url: {{ printf "%s#%s" $rule.runbookURL (lower $name) | quote }}
{{- end }}
{{- end -}}

{{- /*
A Kubernetes quantity in bytes: (list "the value's name" value). Fails, naming the value, when
it is not a quantity.
*/}}
{{- define "kube-dra-exporter.bytes" -}}
{{- $name := index . 0 -}}
{{- $value := index . 1 -}}
{{- if kindIs "float64" $value -}}{{- $value = printf "%.0f" $value -}}{{- end -}}
{{- $value = toString $value -}}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" $value -}}
{{- $suffix := trimPrefix $number $value -}}
{{- $units := dict "" 1 "k" 1000 "M" 1000000 "G" 1000000000 "T" 1000000000000 "Ki" 1024 "Mi" 1048576 "Gi" 1073741824 "Ti" 1099511627776 -}}
{{- if or (not $number) (not (hasKey $units $suffix)) -}}
{{- fail (printf "%s: %q is not a quantity of bytes (such as 64Mi or 67108864)" $name $value) -}}
{{- end -}}
{{- $bytes := mulf (float64 $number) (index $units $suffix) -}}
{{- if ge $bytes 9223372036854775807.0 -}}
{{- fail (printf "%s: %q is not below 8Ei, the most bytes the exporter takes" $name $value) -}}
{{- end -}}
{{- $bytes | int64 -}}
{{- end -}}

{{- /*
--max-response-bytes: the value given, else a third of the memory limit (64Mi without one).
Refused when it does not fit the limit: one response that size, inflated and decoded, must fit
in the pod beside the runtime.
*/}}
{{- define "kube-dra-exporter.maxResponseBytes" -}}
{{- $given := .Values.exporter.maxResponseBytes -}}
{{- $limit := dig "limits" "memory" "" (.Values.resources | default dict) -}}
{{- $third := 0 -}}
{{- if $limit -}}
{{- $third = div (include "kube-dra-exporter.bytes" (list "resources.limits.memory" $limit) | atoi) 3 -}}
{{- end -}}
{{- if or (eq (toString $given) "") (eq (toString $given) "<nil>") -}}
{{- if $limit -}}{{ $third }}{{- else -}}64Mi{{- end -}}
{{- else -}}
{{- $bytes := include "kube-dra-exporter.bytes" (list "exporter.maxResponseBytes" $given) | atoi -}}
{{- if lt $bytes 65536 -}}
{{- fail (printf "exporter.maxResponseBytes: %v is below 64Ki, the least the exporter takes" $given) -}}
{{- end -}}
{{- if and $limit (gt $bytes $third) -}}
{{- fail (printf "exporter.maxResponseBytes: %v does not fit resources.limits.memory %v: at most a third of it (%d bytes), for one response that size beside the runtime" $given $limit $third) -}}
{{- end -}}
{{- if kindIs "string" $given -}}{{ $given }}{{- else -}}{{ $bytes }}{{- end -}}
{{- end -}}
{{- end -}}

{{- /* A Prometheus duration (30s, 1m, 1m30s, 500ms) in seconds. */}}
{{- define "kube-dra-exporter.seconds" -}}
{{- $total := 0.0 -}}
{{- $units := dict "ms" 0.001 "s" 1.0 "m" 60.0 "h" 3600.0 -}}
{{- range regexFindAll "[0-9]+(ms|s|m|h)" (toString .) -1 -}}
{{- $unit := regexFind "(ms|s|m|h)$" . -}}
{{- $total = addf $total (mulf (float64 (trimSuffix $unit .)) (index $units $unit)) -}}
{{- end -}}
{{- $total -}}
{{- end -}}

{{- /*
The regular expressions the chart takes in the metric lists and exporter.deviceCapacities:
a syntax that Python's re (the exporter's) and Go's RE2 (this check's) read alike, every
string of which Python compiles (tests/test_chart.py tries thousands), and without commas,
at which the exporter splits the lists. Letters, digits, _ : / - and escaped metacharacters;
. ; classes of those and a-z, A-Z, 0-9, negated or not; groups (a|b) and (?:a|b) one level
deep; * + ? and {N}, each lazy with ?; ^ and $ at a branch's ends.
*/ -}}
{{- define "kube-dra-exporter.regularExpression" -}}
^\^?((([A-Za-z0-9_:/-]|\\[.*+?(){}|^$\\\[\]]|\.|\[\^?([A-Za-z0-9_:/]|a-z|A-Z|0-9)+\])|\((\?:)?(([A-Za-z0-9_:/-]|\\[.*+?(){}|^$\\\[\]]|\.|\[\^?([A-Za-z0-9_:/]|a-z|A-Z|0-9)+\])(([*+?]|\{[0-9]{1,3}\})\??)?)*(\|(([A-Za-z0-9_:/-]|\\[.*+?(){}|^$\\\[\]]|\.|\[\^?([A-Za-z0-9_:/]|a-z|A-Z|0-9)+\])(([*+?]|\{[0-9]{1,3}\})\??)?)*)*\))(([*+?]|\{[0-9]{1,3}\})\??)?)*\$?(\|\^?((([A-Za-z0-9_:/-]|\\[.*+?(){}|^$\\\[\]]|\.|\[\^?([A-Za-z0-9_:/]|a-z|A-Z|0-9)+\])|\((\?:)?(([A-Za-z0-9_:/-]|\\[.*+?(){}|^$\\\[\]]|\.|\[\^?([A-Za-z0-9_:/]|a-z|A-Z|0-9)+\])(([*+?]|\{[0-9]{1,3}\})\??)?)*(\|(([A-Za-z0-9_:/-]|\\[.*+?(){}|^$\\\[\]]|\.|\[\^?([A-Za-z0-9_:/]|a-z|A-Z|0-9)+\])(([*+?]|\{[0-9]{1,3}\})\??)?)*)*\))(([*+?]|\{[0-9]{1,3}\})\??)?)*\$?)*$
{{- end -}}

{{- /*
Values that would start a pod that cannot work: refused when the chart renders, naming them.
*/}}
{{- define "kube-dra-exporter.refusals" -}}
{{- $e := .Values.exporter -}}
{{- if eq (int $e.port) (int $e.telemetryPort) -}}
{{- fail (printf "exporter.port and exporter.telemetryPort are both %v: the two listeners need two ports" $e.port) -}}
{{- end -}}
{{- range $kind := list "servicemonitor" "podmonitor" -}}
{{- $monitor := index $.Values.prometheus $kind -}}
{{- if and $monitor.enabled $monitor.scrapeTimeout -}}
{{- $scrape := include "kube-dra-exporter.seconds" $monitor.scrapeTimeout | float64 -}}
{{- if ge (float64 $e.timeout) $scrape -}}
{{- fail (printf "exporter.timeout %v must be below prometheus.%s.scrapeTimeout %v: a collection cut off by the scrape would never be served" $e.timeout $kind $monitor.scrapeTimeout) -}}
{{- end -}}
{{- end -}}
{{- if and $.Values.prometheus.enabled $monitor.enabled $.Values.authFilter.enabled (not $.Values.authFilter.scrapeCredentials.name) (not (hasKey (default (dict) $monitor.endpointAdditionalProperties) "authorization")) -}}
{{- fail (printf "authFilter.enabled with prometheus.%s.enabled: set authFilter.scrapeCredentials.name, the Secret holding the token Prometheus scrapes with (or authorization in prometheus.%s.endpointAdditionalProperties)" $kind $kind) -}}
{{- end -}}
{{- end -}}
{{- $syntax := include "kube-dra-exporter.regularExpression" . -}}
{{- range $name := list "metricAllowlist" "metricDenylist" "metricOptInList" "deviceCapacities" -}}
{{- $given := index $e $name -}}
{{- range (kindIs "string" $given | ternary (list $given) $given) -}}
{{- if not (regexMatch $syntax .) -}}
{{- fail (printf "exporter.%s: %q is not a regular expression the chart takes: letters, digits, _ : / - . and escaped metacharacters, classes, groups one level deep, * + ? {N}, ^ and $, no commas (the chart's README says more; extraArgs takes any)" $name .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $e.expectPools (not (has "nodes" $e.resources)) -}}
{{- fail "exporter.expectPools needs nodes in exporter.resources: the Node view says what each node is labelled" -}}
{{- end -}}
{{- /* Two attributes or data keys that the exporter would write as one label. */ -}}
{{- $labels := dict -}}
{{- range $e.deviceAttributes -}}
{{- $label := printf "attribute_%s" (last (splitList "/" .)) -}}
{{- if hasKey $labels $label -}}
{{- fail (printf "exporter.deviceAttributes: %q and %q both give the label %s" (get $labels $label) . $label) -}}
{{- end -}}
{{- $_ := set $labels $label . -}}
{{- end -}}
{{- range $e.claimDeviceData -}}
{{- $label := printf "data_%s" (regexReplaceAll "[^A-Za-z0-9_]" . "_") -}}
{{- if hasKey $labels $label -}}
{{- fail (printf "exporter.claimDeviceData: %q and %q both give the label %s" (get $labels $label) . $label) -}}
{{- end -}}
{{- $_ := set $labels $label . -}}
{{- end -}}
{{- end -}}

{{/* With --auth-filter, the monitors' `authorization`: the scraper's token from a Secret. */}}
{{- define "kube-dra-exporter.monitorAuthorization" -}}
{{- $credentials := .Values.authFilter.scrapeCredentials -}}
{{- if and .Values.authFilter.enabled $credentials.name -}}
{{- toJson (dict "type" "Bearer" "credentials" (dict "name" $credentials.name "key" $credentials.key)) -}}
{{- end -}}
{{- end -}}

{{/* The Secret the exporter's certificate and key are in (tls.enabled). */}}
{{- define "kube-dra-exporter.tlsSecret" -}}
{{- if .Values.tls.certManager.enabled -}}
{{ include "kube-dra-exporter.fullname" . }}-tls
{{- else -}}
{{ .Values.tls.existingSecret }}
{{- end -}}
{{- end -}}

{{/* The Service's DNS name: the certificate holds it, the monitors verify it. */}}
{{- define "kube-dra-exporter.serviceDNS" -}}
{{ include "kube-dra-exporter.fullname" . }}.{{ include "kube-dra-exporter.namespace" . }}.svc
{{- end -}}

{{/* "true" when the kubelet's probes need the plain probe listener: client certificates are
     required, and the kubelet presents none. */}}
{{- define "kube-dra-exporter.probeListener" -}}
{{- if and .Values.tls.enabled (has .Values.tls.clientAuthType (list "RequireAnyClientCert" "RequireAndVerifyClientCert")) -}}
true
{{- end -}}
{{- end -}}

{{/* --tls-config's file: paths where the pod mounts the Secrets. */}}
{{- define "kube-dra-exporter.webConfig" -}}
{{- $t := .Values.tls -}}
{{- $server := dict "cert_file" "/etc/kdraexp/tls/tls.crt" "key_file" "/etc/kdraexp/tls/tls.key" "client_auth_type" $t.clientAuthType "min_version" $t.minVersion -}}
{{- if or $t.clientCA.secret $t.clientCA.configMap -}}
{{- $_ := set $server "client_ca_file" (printf "/etc/kdraexp/client-ca/%s" $t.clientCA.key) -}}
{{- end -}}
{{- with $t.clientAllowedSANs -}}
{{- $_ := set $server "client_allowed_sans" . -}}
{{- end -}}
{{- toYaml (dict "tls_server_config" $server) -}}
{{- end -}}

{{/* The volumes of tls.enabled: each Secret or ConfigMap mounted as a directory, never through
     subPath, so that the kubelet's updates reach the exporter. */}}
{{- define "kube-dra-exporter.tlsVolumes" -}}
{{- $t := .Values.tls -}}
- name: tls
  secret:
    secretName: {{ include "kube-dra-exporter.tlsSecret" . }}
- name: web-config
  secret:
    secretName: {{ include "kube-dra-exporter.fullname" . }}-web-config
{{- if $t.clientCA.secret }}
- name: client-ca
  secret:
    secretName: {{ $t.clientCA.secret }}
{{- else if $t.clientCA.configMap }}
- name: client-ca
  configMap:
    name: {{ $t.clientCA.configMap }}
{{- end }}
{{- end -}}

{{- define "kube-dra-exporter.tlsVolumeMounts" -}}
- name: tls
  mountPath: /etc/kdraexp/tls
  readOnly: true
- name: web-config
  mountPath: /etc/kdraexp/web
  readOnly: true
{{- if or .Values.tls.clientCA.secret .Values.tls.clientCA.configMap }}
- name: client-ca
  mountPath: /etc/kdraexp/client-ca
  readOnly: true
{{- end }}
{{- end -}}

{{/* A monitor endpoint's tlsConfig: the Service's name verified against the CA, and the
     client certificate Prometheus presents if one is given. */}}
{{- define "kube-dra-exporter.monitorTLS" -}}
{{- $m := .Values.tls.monitor -}}
{{- $config := dict "serverName" (include "kube-dra-exporter.serviceDNS" .) "ca" (dict "secret" (dict "name" ($m.ca.secret | default (include "kube-dra-exporter.tlsSecret" .)) "key" $m.ca.key)) -}}
{{- with $m.clientCertSecret -}}
{{- $_ := set $config "cert" (dict "secret" (dict "name" . "key" "tls.crt")) -}}
{{- $_ := set $config "keySecret" (dict "name" . "key" "tls.key") -}}
{{- end -}}
{{- toYaml $config -}}
{{- end -}}
