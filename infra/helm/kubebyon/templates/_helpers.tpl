{{- define "kubebyon.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}

{{/* Labels of every object, beside a function's selector labels. */}}
{{- define "kubebyon.base" -}}
app.kubernetes.io/part-of: kubebyon
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{/* Labels of an object that belongs to no one function. */}}
{{- define "kubebyon.labels" -}}
{{ include "kubebyon.base" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Selector labels of one function: (list $ name). */}}
{{- define "kubebyon.selector" -}}
app.kubernetes.io/name: {{ index . 1 }}
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
{{- end }}

{{/* The ServiceAccount of a function: (list $ needsHost). */}}
{{/* The ServiceAccount of a function by its host access: (list $ access),
access "jobs" (what the jobs and host schedules do), "credentials" (HTTP
functions: a cluster's kubeconfig Secret, in tenant namespaces only) or ""
(no host access, no token). */}}
{{- define "kubebyon.serviceAccount" -}}
{{- $access := index . 1 -}}
{{- if eq $access "jobs" -}}{{ (index . 0).Release.Name }}-host
{{- else if eq $access "credentials" -}}{{ (index . 0).Release.Name }}-credentials
{{- else -}}{{ (index . 0).Release.Name }}{{- end -}}
{{- end }}

{{/* The pod spec every function shares: (dict "root" $ "name" name "host" access "args" list "ports" list "probes" bool), access as for kubebyon.serviceAccount. */}}
{{- define "kubebyon.pod" -}}
{{- $root := .root -}}
serviceAccountName: {{ include "kubebyon.serviceAccount" (list $root .host) }}
automountServiceAccountToken: {{ and (ne .host "") $root.Values.host.inCluster }}
securityContext:
  {{- toYaml $root.Values.podSecurityContext | nindent 2 }}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- range $field := list "nodeSelector" "tolerations" "affinity" "topologySpreadConstraints" }}
{{- with index $root.Values $field }}
{{ $field }}:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
containers:
  - name: {{ .name }}
    image: {{ include "kubebyon.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    command: ["/usr/local/bin/{{ .name }}"]
    {{- with .args }}
    args:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    envFrom:
      - configMapRef:
          name: {{ $root.Release.Name }}-config
      - secretRef:
          name: {{ $root.Values.existingSecret }}
    env:
      - name: LOG_FORMAT
        value: json
      {{- if .http }}
      - name: PORT
        value: {{ $root.Values.port | quote }}
      {{- end }}
      - name: METRICS_PORT
        value: {{ $root.Values.metricsPort | quote }}
      - name: WORKER_ID
        valueFrom:
          fieldRef:
            fieldPath: metadata.name
      {{- if .host }}
      - name: KUBEBYON_HOST_KUBECONFIG
        value: {{ if $root.Values.host.inCluster }}in-cluster{{ else }}/etc/kubebyon/host/kubeconfig{{ end }}
      {{- end }}
      {{- with $root.Values.extraEnv }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    ports:
      {{- if .http }}
      - name: http
        containerPort: {{ $root.Values.port }}
      {{- end }}
      - name: metrics
        containerPort: {{ $root.Values.metricsPort }}
    {{- if .probes }}
    # /livez reads nothing and sits outside the concurrency limit: a slow
    # database or a full pod is not a dead process (docs/runbooks/deploy.md).
    startupProbe:
      httpGet:
        path: /livez
        port: {{ if .http }}http{{ else }}metrics{{ end }}
      periodSeconds: 2
      failureThreshold: 30
    livenessProbe:
      httpGet:
        path: /livez
        port: {{ if .http }}http{{ else }}metrics{{ end }}
      periodSeconds: 10
      timeoutSeconds: 1
      failureThreshold: 3
    {{- if .http }}
    readinessProbe:
      httpGet:
        path: /readyz
        port: http
      periodSeconds: 5
      timeoutSeconds: 2
    # Endpoints stop sending before the process is told to stop.
    lifecycle:
      preStop:
        sleep:
          seconds: 5
    {{- end }}
    {{- end }}
    resources:
      {{- toYaml (mergeOverwrite (deepCopy $root.Values.resources) (get $root.Values.functionResources .name | default dict)) | nindent 6 }}
    securityContext:
      {{- toYaml $root.Values.securityContext | nindent 6 }}
    {{- $hostMount := and (ne .host "") (not $root.Values.host.inCluster) }}
    {{- if or $hostMount $root.Values.extraVolumeMounts }}
    volumeMounts:
      {{- if $hostMount }}
      - name: host-kubeconfig
        mountPath: /etc/kubebyon/host
        readOnly: true
      {{- end }}
      {{- with $root.Values.extraVolumeMounts }}
      {{- toYaml . | nindent 6 }}
      {{- end }}
    {{- end }}
{{- if or $hostMount $root.Values.extraVolumes }}
volumes:
  {{- if $hostMount }}
  - name: host-kubeconfig
    secret:
      {{- $secret := required "host.kubeconfigSecret is required when host.inCluster is false" $root.Values.host.kubeconfigSecret }}
      secretName: {{ if eq .host "credentials" }}{{ $root.Values.host.credentialsKubeconfigSecret | default $secret }}{{ else }}{{ $secret }}{{ end }}
      items:
        - key: {{ $root.Values.host.kubeconfigKey }}
          path: kubeconfig
  {{- end }}
  {{- with $root.Values.extraVolumes }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end }}
{{- end }}
