{{/* The name of every object this release makes. */}}
{{- define "gpuslice.name" -}}
{{- if eq .Release.Name .Chart.Name -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "gpuslice.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "gpuslice.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpuslice.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Where NVML is inside the pod. */}}
{{- define "gpuslice.nvml" -}}
/usr/lib/gpuslice-host/libnvidia-ml.so.1
{{- end -}}

{{/* The environment NVML's users get (driver.env). */}}
{{- define "gpuslice.driverEnv" -}}
{{- range $name, $value := .Values.driver.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* The driver's extra host directories (driver.hostPaths). */}}
{{- define "gpuslice.driverMounts" -}}
{{- range $i, $path := .Values.driver.hostPaths }}
- {name: driver-{{ $i }}, mountPath: {{ $path }}}
{{- end }}
{{- end -}}
