{{- define "fencegate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "fencegate.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fencegate.labels" -}}
{{ include "fencegate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "fencegate.image" -}}
{{- $tag := .Values.image.tag | default (printf "v%s" .Chart.AppVersion) -}}
{{- if eq $tag "latest" -}}
{{- fail "image.tag: name a release (default v + appVersion), not latest" -}}
{{- end -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}

{{- define "fencegate.shared" -}}
{{- if eq .Values.profile "shared" -}}true{{- else if eq .Values.profile "local" -}}{{- else -}}
{{- fail (printf "profile: %q; want shared or local" .Values.profile) -}}
{{- end -}}
{{- end -}}

{{/* "postgres" or "etcd" in profile shared, "" in local. */}}
{{- define "fencegate.sharedStore" -}}
{{- if include "fencegate.shared" . -}}
{{- if has .Values.sharedStore (list "postgres" "etcd") -}}{{ .Values.sharedStore }}{{- else -}}
{{- fail (printf "sharedStore: %q; want postgres or etcd" .Values.sharedStore) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The TLS files of etcd.tlsSecret, mounted read-only. */}}
{{- define "fencegate.etcdTLSDir" -}}/etc/fencegate/etcd-tls{{- end -}}

{{- define "fencegate.replicas" -}}
{{- if include "fencegate.shared" . -}}{{ .Values.replicaCount }}{{- else -}}1{{- end -}}
{{- end -}}

{{/*
GOMEMLIMIT: goMemLimitPercent of resources.limits.memory, in MiB. The
runtime collects harder near it instead of the container being OOM-killed.
*/}}
{{- define "fencegate.gomemlimit" -}}
{{- $limit := .Values.resources.limits.memory | default "" | toString -}}
{{- $n := regexFind "^[0-9]+" $limit -}}
{{- $unit := trimPrefix $n $limit -}}
{{- $mib := 0 -}}
{{- if eq $unit "Ki" -}}{{- $mib = div (atoi $n) 1024 -}}
{{- else if eq $unit "Mi" -}}{{- $mib = atoi $n -}}
{{- else if eq $unit "Gi" -}}{{- $mib = mul (atoi $n) 1024 -}}
{{- else -}}{{- fail (printf "resources.limits.memory: %q; want a limit in Ki, Mi or Gi (GOMEMLIMIT is derived from it)" $limit) -}}
{{- end -}}
{{- printf "%dMiB" (div (mul $mib .Values.goMemLimitPercent) 100) -}}
{{- end -}}

{{/* The fencegate configuration file. */}}
{{- define "fencegate.config" -}}
{{- $full := include "fencegate.fullname" . -}}
{{- $hosts := list $full (printf "%s.%s" $full .Release.Namespace) ".svc" ".svc.cluster.local" -}}
{{- $c := dict
  "gateway" (dict "listen" "0.0.0.0:8080" "shutdown_timeout" (printf "%ds" (int .Values.gateway.shutdownTimeoutSeconds)) "routes" .Values.routes)
  "admin" (dict "listen" "0.0.0.0:9090" "allowed_hosts" $hosts "auth" (dict "api_keys" .Values.admin.apiKeys))
-}}
{{- if .Values.coordinator.enabled -}}
{{- $_ := set $c "coordinator" (dict "enabled" true "listen" "0.0.0.0:8081" "allowed_hosts" $hosts "auth" (dict "api_keys" .Values.coordinator.apiKeys)) -}}
{{- end -}}
{{- $store := include "fencegate.sharedStore" . -}}
{{- if eq $store "postgres" -}}
{{- $_ := set $c "store" (dict "postgres" (dict "url" "${DATABASE_URL}" "max_conns" .Values.postgres.maxConns)) -}}
{{- $_ := set $c "fence" (dict "mode" "shared" "marker_conns" .Values.postgres.markerConns) -}}
{{- else if eq $store "etcd" -}}
{{- $e := .Values.etcd -}}
{{- if not $e.endpoints -}}{{- fail "etcd.endpoints: name the etcd cluster's client URLs (sharedStore etcd)" -}}{{- end -}}
{{- $etcd := dict "endpoints" $e.endpoints "prefix" $e.prefix -}}
{{- if $e.username -}}
{{- $_ := set $etcd "username" $e.username -}}
{{- $_ := set $etcd "password" "${ETCD_PASSWORD}" -}}
{{- end -}}
{{- if $e.tlsSecret -}}
{{- $dir := include "fencegate.etcdTLSDir" . -}}
{{- $tls := dict "ca_file" (printf "%s/ca.crt" $dir) "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir) -}}
{{- if $e.serverName -}}{{- $_ := set $tls "server_name" $e.serverName -}}{{- end -}}
{{- $_ := set $etcd "tls" $tls -}}
{{- end -}}
{{- $_ := set $c "store" (dict "etcd" $etcd) -}}
{{- $_ := set $c "fence" (dict "mode" "shared") -}}
{{- else -}}
{{- $_ := set $c "store" (dict "embedded" (dict "path" "/var/lib/fencegate/fencegate.db")) -}}
{{- $_ := set $c "fence" (dict "mode" "local") -}}
{{- end -}}
{{- toYaml (mergeOverwrite $c (deepCopy .Values.config)) -}}
{{- end -}}
